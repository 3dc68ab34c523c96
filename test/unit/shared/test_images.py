"""lerobot_ros.protocol.wire.images: every accepted encoding decodes to the right RGB, every
malformed frame is refused with a message naming what arrived."""

from __future__ import annotations

import cv2
import numpy as np
import pytest
from sensor_msgs.msg import CompressedImage, Image

from lerobot_ros.protocol.wire import images
from lerobot_ros.protocol.wire.images import (
    CompressedFrame,
    ImageError,
    compressed_to_rgb,
    image_message_to_rgb,
    is_jpeg,
    raw_to_rgb,
    resize_rgb,
    rgb_to_compressed,
    rgb_to_raw,
)

RED_RGB = np.zeros((48, 64, 3), dtype=np.uint8)
RED_RGB[..., 0] = 255


def _assert_red(rgb: np.ndarray, tolerance: int = 0) -> None:
    assert rgb.shape == (48, 64, 3) and rgb.dtype == np.uint8
    assert rgb[..., 0].min() >= 255 - tolerance, "red channel lost"
    assert rgb[..., 1].max() <= tolerance and rgb[..., 2].max() <= tolerance, (
        "green/blue leaked in (channel swap?)"
    )


def _gradient_rgb(height: int = 40, width: int = 30) -> np.ndarray:
    rows = np.arange(height, dtype=np.uint8)[:, None]
    cols = np.arange(width, dtype=np.uint8)[None, :]
    channels = np.broadcast_arrays(rows * 3 + cols, rows * 5, 200 - cols * 2)
    return np.stack(channels, axis=-1).astype(np.uint8)


def _raw(encoding: str, pixels: np.ndarray, step: int | None = None) -> Image:
    height, width = pixels.shape[:2]
    row = pixels.reshape(height, -1)
    step = row.shape[1] if step is None else step
    padded = np.zeros((height, step), dtype=np.uint8)
    padded[:, : row.shape[1]] = row
    return Image(height=height, width=width, encoding=encoding, step=step, data=padded.tobytes())


def _compressed(data: bytes, fmt: str) -> CompressedImage:
    msg = CompressedImage()
    msg.format = fmt
    msg.data = data
    return msg


def _png_bytes(bgr_or_gray: np.ndarray) -> bytes:
    ok, encoded = cv2.imencode(".png", bgr_or_gray)
    assert ok
    return encoded.tobytes()


# --- round trips ------------------------------------------------------------


def test_red_stays_red_through_jpeg():
    msg = rgb_to_compressed(RED_RGB, quality=90)
    assert msg.format == "jpeg"
    assert bytes(msg.data[:3]) == b"\xff\xd8\xff"
    assert is_jpeg(msg)
    _assert_red(compressed_to_rgb(msg), tolerance=3)


def test_red_stays_red_through_raw_and_raw_is_exact():
    msg = rgb_to_raw(RED_RGB)
    assert (msg.encoding, msg.step, msg.height, msg.width, msg.is_bigendian) == (
        "rgb8",
        64 * 3,
        48,
        64,
        0,
    )
    _assert_red(raw_to_rgb(msg))
    gradient = _gradient_rgb()
    np.testing.assert_array_equal(raw_to_rgb(rgb_to_raw(gradient)), gradient)


def test_raw_from_non_contiguous_input_is_row_major():
    flipped = _gradient_rgb()[:, ::-1]
    np.testing.assert_array_equal(raw_to_rgb(rgb_to_raw(flipped)), flipped)


def test_unpadded_rgb8_is_a_read_only_view():
    rgb = raw_to_rgb(rgb_to_raw(_gradient_rgb()))
    assert not rgb.flags.writeable
    assert rgb.flags.c_contiguous


def test_bgr8_message_decodes_to_rgb():
    gradient = _gradient_rgb()
    bgr = gradient[..., ::-1]
    result = raw_to_rgb(_raw("bgr8", bgr))
    np.testing.assert_array_equal(result, gradient)
    assert result.flags.writeable


def test_rgba8_and_bgra8_drop_alpha():
    gradient = _gradient_rgb()
    alpha = np.full(gradient.shape[:2] + (1,), 7, dtype=np.uint8)
    np.testing.assert_array_equal(
        raw_to_rgb(_raw("rgba8", np.concatenate([gradient, alpha], -1))), gradient
    )
    np.testing.assert_array_equal(
        raw_to_rgb(_raw("bgra8", np.concatenate([gradient[..., ::-1], alpha], -1))), gradient
    )


def test_mono8_becomes_three_equal_channels():
    gray = _gradient_rgb()[..., 0]
    result = raw_to_rgb(_raw("mono8", gray))
    assert result.shape == gray.shape + (3,)
    for channel in range(3):
        np.testing.assert_array_equal(result[..., channel], gray)


@pytest.mark.parametrize("encoding, channels", [("rgb8", 3), ("bgr8", 3), ("mono8", 1)])
def test_padded_step_is_stripped(encoding, channels):
    gradient = _gradient_rgb(height=5, width=7)
    pixels = {"rgb8": gradient, "bgr8": gradient[..., ::-1], "mono8": gradient[..., 0]}[encoding]
    msg = _raw(encoding, pixels, step=7 * channels + 5)
    result = raw_to_rgb(msg)
    expected = gradient if channels == 3 else np.repeat(gradient[..., :1], 3, axis=-1)
    np.testing.assert_array_equal(result, expected)
    assert result.flags.c_contiguous


def test_image_message_to_rgb_dispatches_on_type():
    _assert_red(image_message_to_rgb(rgb_to_raw(RED_RGB)))
    _assert_red(image_message_to_rgb(rgb_to_compressed(RED_RGB, 95)), tolerance=3)
    with pytest.raises(
        ImageError, match="expected a sensor_msgs Image or CompressedImage, got str"
    ):
        image_message_to_rgb("not an image")


@pytest.mark.parametrize("fmt", ["png", "bgr8; png compressed bgr8", "rgb8; png compressed bgr8"])
def test_png_decodes_exactly(fmt):
    gradient = _gradient_rgb()
    msg = _compressed(_png_bytes(cv2.cvtColor(gradient, cv2.COLOR_RGB2BGR)), fmt)
    np.testing.assert_array_equal(compressed_to_rgb(msg), gradient)
    assert not is_jpeg(msg)


def test_gray_png_becomes_three_channels():
    gray = _gradient_rgb()[..., 1]
    result = compressed_to_rgb(_compressed(_png_bytes(gray), "mono8; png compressed mono8"))
    np.testing.assert_array_equal(result, np.repeat(gray[..., None], 3, axis=-1))


@pytest.mark.parametrize("fmt", ["jpeg", "rgb8; jpeg compressed bgr8", "JPEG", ""])
def test_image_transport_jpeg_formats(fmt):
    jpeg = rgb_to_compressed(RED_RGB, 90)
    msg = _compressed(bytes(jpeg.data), fmt)
    _assert_red(compressed_to_rgb(msg), tolerance=3)
    assert is_jpeg(msg)


def test_jpeg_with_zero_padding_after_eoi_is_accepted():
    padded = bytes(rgb_to_compressed(RED_RGB, 90).data) + b"\x00" * 16
    _assert_red(compressed_to_rgb(_compressed(padded, "jpeg")), tolerance=3)


# --- refusals ---------------------------------------------------------------


def test_wrong_byte_count_names_expected_and_actual():
    msg = rgb_to_raw(RED_RGB)
    msg.data = bytes(msg.data)[:-1]
    with pytest.raises(ImageError, match=r"= 9216 data bytes .* got 9215"):
        raw_to_rgb(msg)


def test_step_smaller_than_row_is_refused():
    msg = rgb_to_raw(RED_RGB)
    msg.step = 64 * 3 - 1
    with pytest.raises(ImageError, match=r"step >= width\*channels = 64\*3 = 192 .* got step 191"):
        raw_to_rgb(msg)


def test_zero_size_is_refused():
    with pytest.raises(ImageError, match="positive Image size, got height 0 width 0"):
        raw_to_rgb(Image(encoding="rgb8"))


@pytest.mark.parametrize("encoding", ["16UC1", "mono16", "rgb16", "32FC1", "bayer_rggb8", ""])
def test_unsupported_encoding_lists_accepted_ones(encoding):
    msg = Image(height=2, width=2, encoding=encoding, step=4, data=bytes(8))
    with pytest.raises(ImageError) as error:
        raw_to_rgb(msg)
    assert repr(encoding) in str(error.value)
    assert "'rgb8', 'bgr8', 'rgba8', 'bgra8', 'mono8'" in str(error.value)


def test_truncated_jpeg_is_refused():
    # OpenCV would decode this into a half-grey image without complaint.
    data = bytes(rgb_to_compressed(_gradient_rgb(200, 200), 90).data)
    truncated = _compressed(data[: len(data) // 2], "jpeg")
    with pytest.raises(ImageError, match=r"EOI marker ff d9, got \d+ bytes ending .*truncated"):
        compressed_to_rgb(truncated)
    assert not is_jpeg(truncated)


def test_truncated_png_is_refused():
    data = _png_bytes(_gradient_rgb())
    with pytest.raises(ImageError, match="IEND"):
        compressed_to_rgb(_compressed(data[:-20], "png"))


def test_garbage_bytes_are_refused_with_magic_shown():
    msg = _compressed(b"hello world, not a jpeg", "jpeg")
    with pytest.raises(
        ImageError,
        match=r"expected JPEG data .* 23 bytes starting 68 65 6c 6c 6f 20 77 6f, format 'jpeg'",
    ):
        compressed_to_rgb(msg)
    assert not is_jpeg(msg)


def test_corrupt_jpeg_body_is_refused():
    # Right header and EOI, rubbish in between: imdecode itself must fail.
    msg = _compressed(b"\xff\xd8\xff" + b"\x13" * 200 + b"\xff\xd9", "jpeg")
    with pytest.raises(ImageError, match="OpenCV could not decode"):
        compressed_to_rgb(msg)


def test_format_and_data_disagreeing_is_refused():
    msg = _compressed(_png_bytes(_gradient_rgb()), "jpeg")
    with pytest.raises(
        ImageError, match=r"expected JPEG data as the format says, got .* 89 50 4e 47"
    ):
        compressed_to_rgb(msg)
    assert not is_jpeg(msg)


def test_empty_is_refused():
    with pytest.raises(ImageError, match="empty CompressedImage"):
        compressed_to_rgb(_compressed(b"", "jpeg"))


def test_oversize_is_refused_before_decoding():
    msg = rgb_to_compressed(RED_RGB, 90)
    size = len(msg.data)
    assert compressed_to_rgb(msg, max_bytes=size).shape == RED_RGB.shape
    with pytest.raises(ImageError, match=f"at most {size - 1} bytes, got {size} bytes"):
        compressed_to_rgb(msg, max_bytes=size - 1)


@pytest.mark.parametrize(
    "fmt", ["16UC1; compressedDepth png", "tiff", "bgr8; webp compressed bgr8"]
)
def test_unsupported_compressed_format_is_refused(fmt):
    with pytest.raises(ImageError, match=f"expected a JPEG or PNG camera frame .*format {fmt!r}"):
        compressed_to_rgb(_compressed(_png_bytes(_gradient_rgb()), fmt))


def test_sixteen_bit_png_is_refused():
    depth = np.full((4, 4), 1000, dtype=np.uint16)
    with pytest.raises(ImageError, match="expected an 8-bit camera frame, got a uint16 image"):
        compressed_to_rgb(_compressed(_png_bytes(depth), "png"))


@pytest.mark.parametrize("quality", [0, 101, -5, True, 50.0])
def test_quality_bounds(quality):
    with pytest.raises(ValueError, match="quality must be an integer in 1..100"):
        rgb_to_compressed(RED_RGB, quality)


@pytest.mark.parametrize("quality", [1, 100])
def test_quality_extremes_encode(quality):
    # Quality 1 quantises pure red to ~242: still unmistakably red.
    _assert_red(compressed_to_rgb(rgb_to_compressed(RED_RGB, quality)), tolerance=20)


@pytest.mark.parametrize(
    "bad",
    [
        np.zeros((4, 4), np.uint8),
        np.zeros((4, 4, 4), np.uint8),
        np.zeros((4, 4, 3), np.float32),
        np.zeros((0, 4, 3), np.uint8),
    ],
)
def test_encoders_refuse_non_rgb_arrays(bad):
    with pytest.raises(ImageError, match="expected"):
        rgb_to_raw(bad)
    with pytest.raises(ImageError, match="expected"):
        rgb_to_compressed(bad, 90)


# --- resize -------------------------------------------------------------------


def test_resize_shrinks_and_enlarges_keeping_colour():
    small = resize_rgb(RED_RGB, 24, 32)
    assert small.shape == (24, 32, 3)
    assert (small[..., 0] == 255).all() and (small[..., 1:] == 0).all()
    large = resize_rgb(RED_RGB, 96, 100)
    assert large.shape == (96, 100, 3)
    assert (large[..., 0] == 255).all()


def test_resize_shrink_uses_area_averaging():
    # Shrinking a 1-pixel checkerboard 3x: INTER_AREA averages each 3x3 block
    # (4 or 5 white pixels of 9: 113 or 142); bilinear would sample single
    # pixels and keep pure 0/255, i.e. alias.
    checker = ((np.indices((12, 12)).sum(axis=0) % 2) * 255).astype(np.uint8)
    rgb = np.repeat(checker[..., None], 3, axis=-1)
    shrunk = resize_rgb(rgb, 4, 4)
    assert set(np.unique(shrunk).tolist()) == {113, 142}


def test_resize_same_size_returns_input_and_refuses_bad_size():
    assert resize_rgb(RED_RGB, 48, 64) is RED_RGB
    with pytest.raises(ValueError, match="positive target size"):
        resize_rgb(RED_RGB, 0, 10)


def test_declared_size_is_read_from_jpeg_and_png_headers_without_decoding():
    import cv2

    from lerobot_ros.protocol.wire.images import declared_size

    rgb = np.zeros((37, 53, 3), np.uint8)
    assert declared_size(memoryview(bytes(rgb_to_compressed(rgb, 80).data)), "jpeg") == (37, 53)
    ok, png = cv2.imencode(".png", rgb)
    assert declared_size(memoryview(png.tobytes()), "png") == (37, 53)
    for codec in ("jpeg", "png", None):
        assert declared_size(memoryview(b"not an image"), codec) is None


def test_a_small_file_declaring_a_huge_image_is_refused_before_decoding():
    import cv2

    ok, png = cv2.imencode(".png", np.zeros((3000, 3000, 3), np.uint8))  # tiny file, 9 MP
    msg = CompressedImage(format="png", data=png.tobytes())
    assert len(msg.data) < 100_000
    with pytest.raises(ImageError, match="at most 1000000 pixels, got a PNG declaring 3000x3000"):
        compressed_to_rgb(msg, max_pixels=1_000_000)
    assert compressed_to_rgb(msg, max_pixels=10_000_000).shape == (3000, 3000, 3)


def test_a_compressed_frame_reads_its_codec_once_for_forwarding_and_decoding():
    jpeg = CompressedFrame.of(rgb_to_compressed(RED_RGB, 90))
    assert (jpeg.sniffed, jpeg.declared) == ("jpeg", "jpeg") and jpeg.is_complete_jpeg()
    _assert_red(jpeg.to_rgb(), tolerance=3)
    unlabelled = CompressedFrame.of(_compressed(_png_bytes(_gradient_rgb()), ""))
    assert (unlabelled.sniffed, unlabelled.declared) == (
        "png",
        "png",
    ) and not unlabelled.is_complete_jpeg()
    mislabelled = CompressedFrame.of(
        _compressed(bytes(rgb_to_compressed(RED_RGB, 90).data), "png")
    )
    assert (mislabelled.sniffed, mislabelled.declared) == (
        "jpeg",
        "png",
    ) and not mislabelled.is_complete_jpeg()
    with pytest.raises(ImageError, match="expected PNG data as the format says"):
        mislabelled.to_rgb()


@pytest.mark.parametrize("fmt", ["jpeg", ""])
def test_a_bounded_decode_sniffs_the_data_once(fmt, monkeypatch):
    sniffed = []
    real_sniff = images._sniff_codec
    monkeypatch.setattr(images, "_sniff_codec", lambda data: sniffed.append(1) or real_sniff(data))
    msg = _compressed(bytes(rgb_to_compressed(RED_RGB, 90).data), fmt)
    _assert_red(compressed_to_rgb(msg, max_bytes=1 << 20, max_pixels=1 << 20), tolerance=3)
    assert len(sniffed) == 1


def test_a_raw_frame_is_bounded_in_bytes_before_anything_else():
    msg = rgb_to_raw(RED_RGB)
    size = len(msg.data)
    _assert_red(raw_to_rgb(msg, max_bytes=size))
    with pytest.raises(
        ImageError, match=f"'rgb8' Image of {size} bytes; at most {size - 1} are accepted"
    ):
        raw_to_rgb(msg, max_bytes=size - 1)
    msg.encoding = "unknown"  # the bound comes first: nothing of an oversize frame is interpreted
    with pytest.raises(ImageError, match=f"of {size} bytes; at most {size - 1} are accepted"):
        image_message_to_rgb(msg, max_bytes=size - 1)


# --- decoding at reduced size (JPEG DCT scaling) ------------------------------


def _textured_scene(height: int, width: int) -> np.ndarray:
    """Gradients plus noise, like a camera's scene: JPEG at q90 keeps a realistic amount of
    detail."""
    rng = np.random.default_rng(7)
    y, x = np.mgrid[0:height, 0:width]
    base = np.stack(
        [x * 255 // width, y * 255 // height, (x + y) * 255 // (width + height)], axis=-1
    )
    return np.clip(base + rng.normal(0, 12, base.shape), 0, 255).astype(np.uint8)


@pytest.mark.parametrize(
    ("size", "at_least", "denominator"),
    [
        ((480, 640), (96, 128), 4),
        ((480, 640), (60, 80), 8),
        ((480, 640), (61, 80), 4),
        ((720, 1280), (96, 128), 4),
        ((480, 640), (240, 320), 2),
        ((480, 640), (241, 320), 1),
        ((480, 640), (480, 640), 1),
        ((96, 128), (480, 640), 1),
        ((481, 641), (61, 81), 8),
    ],
)
def test_the_scale_is_the_largest_that_stays_at_least_the_target(size, at_least, denominator):
    assert images.jpeg_scale_denominator(size, at_least) == denominator


@pytest.mark.parametrize(
    ("size", "target"),
    [
        ((480, 640), (96, 128)),
        ((480, 640), (240, 320)),
        ((720, 1280), (96, 128)),
        ((720, 1280), (224, 224)),
    ],
)
def test_a_reduced_jpeg_decode_then_resize_matches_the_full_decode_then_resize(size, target):
    """Tolerance: mean absolute difference under 1.5 levels of 255, 99th percentile under 6, on a
    textured scene.

    (JPEG q90 itself moves these pixels by ~4 levels on average.)
    """
    msg = images.rgb_to_compressed(_textured_scene(*size), 90)
    reduced = images.compressed_to_rgb(msg, at_least=target)
    denominator = images.jpeg_scale_denominator(size, target)
    assert denominator > 1 and reduced.shape == (
        -(-size[0] // denominator),
        -(-size[1] // denominator),
        3,
    )
    plain = resize_rgb(images.compressed_to_rgb(msg), *target)
    fast = resize_rgb(reduced, *target)
    difference = np.abs(plain.astype(np.int16) - fast.astype(np.int16))
    assert difference.mean() < 1.5 and np.percentile(difference, 99) < 6


def test_a_reduced_decode_keeps_colours_and_the_full_size_when_the_target_is_not_smaller():
    red = np.zeros((96, 128, 3), np.uint8)
    red[..., 0] = 255
    msg = images.rgb_to_compressed(red, 95)
    small = images.compressed_to_rgb(msg, at_least=(48, 64))
    _assert_red(small, tolerance=8)
    assert images.compressed_to_rgb(msg, at_least=(96, 128)).shape == (96, 128, 3)
    gray = cv2.imencode(".jpg", np.full((96, 128), 77, np.uint8))[1].tobytes()
    assert images.compressed_to_rgb(_compressed(gray, "jpeg"), at_least=(24, 32)).shape == (
        24,
        32,
        3,
    )


def test_png_and_raw_frames_come_back_at_their_own_size_whatever_the_target():
    picture = _gradient_rgb(40, 30)
    png = _compressed(_png_bytes(cv2.cvtColor(picture, cv2.COLOR_RGB2BGR)), "png")
    assert np.array_equal(images.compressed_to_rgb(png, at_least=(10, 8)), picture)
    assert np.array_equal(
        images.image_message_to_rgb(_raw("rgb8", picture), at_least=(10, 8)), picture
    )


def test_a_reduced_decode_still_refuses_a_header_declaring_too_many_pixels():
    msg = images.rgb_to_compressed(_textured_scene(96, 128), 90)
    with pytest.raises(ImageError, match="at most 100 pixels"):
        images.compressed_to_rgb(msg, max_pixels=100, at_least=(12, 16))
