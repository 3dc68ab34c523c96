"""Camera frames between numpy and sensor_msgs (the wire package's image part).

Invariant protected here: every frame that leaves this module is an HxWx3
uint8 RGB numpy array, and every message that leaves it is well formed
(``Image``: encoding "rgb8", step = width*3; ``CompressedImage``: format
"jpeg"). Anything else that arrives (a wrong byte count, a truncated or
corrupt JPEG, a 16-bit depth image, an unknown encoding) is refused with an
``ImageError`` naming what was expected and what arrived, never decoded into
a silently wrong picture.

Used by the robot-side executor (no torch) and by the server, so this module
depends only on numpy, OpenCV and sensor_msgs. We convert ourselves instead of
using cv_bridge: the PyPI port maps 16-bit encodings to 8-bit types and calls
numpy's removed ``tostring()``, and a real cv_bridge is not always installed.
"""

from __future__ import annotations

from dataclasses import dataclass

import cv2
import numpy as np
from sensor_msgs.msg import CompressedImage, Image

__all__ = [
    "ACCEPTED_RAW_ENCODINGS",
    "CompressedFrame",
    "ImageError",
    "compressed_to_rgb",
    "declared_size",
    "frame_at_size",
    "frame_size",
    "image_message_to_rgb",
    "is_jpeg",
    "jpeg_scale_denominator",
    "raw_to_rgb",
    "resize_rgb",
    "rgb_to_compressed",
    "rgb_to_raw",
]


class ImageError(ValueError):
    """A camera frame or image message that cannot be converted faithfully."""


# Channels per pixel of each raw encoding we accept; all are 8 bits per channel.
_RAW_ENCODING_CHANNELS = {"rgb8": 3, "bgr8": 3, "rgba8": 4, "bgra8": 4, "mono8": 1}
ACCEPTED_RAW_ENCODINGS = tuple(_RAW_ENCODING_CHANNELS)
#: How a camera topic carries frames: sensor_msgs/Image or sensor_msgs/CompressedImage.
CAMERA_TRANSPORTS = ("raw", "compressed")

# cvtColor codes that turn each encoding into RGB (rgb8 needs none).
_TO_RGB = {
    "bgr8": cv2.COLOR_BGR2RGB,
    "rgba8": cv2.COLOR_RGBA2RGB,
    "bgra8": cv2.COLOR_BGRA2RGB,
    "mono8": cv2.COLOR_GRAY2RGB,
}

_JPEG_SOI = b"\xff\xd8\xff"
_JPEG_EOI = b"\xff\xd9"
_PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
_PNG_IEND = b"IEND"


# ---------------------------------------------------------------------------
# numpy -> message


def _check_rgb(rgb: np.ndarray) -> None:
    if not isinstance(rgb, np.ndarray):
        raise ImageError(f"expected an HxWx3 uint8 RGB numpy array, got {type(rgb).__name__}")
    if rgb.ndim != 3 or rgb.shape[2] != 3 or rgb.dtype != np.uint8:
        raise ImageError(
            f"expected an HxWx3 uint8 RGB array, got shape {rgb.shape} dtype {rgb.dtype}"
        )
    if rgb.shape[0] == 0 or rgb.shape[1] == 0:
        raise ImageError(f"expected a non-empty image, got shape {rgb.shape}")


def rgb_to_compressed(rgb: np.ndarray, quality: int) -> CompressedImage:
    """JPEG-encode an RGB frame into a ``CompressedImage`` (format "jpeg").

    The header is left default; the caller stamps it.
    """
    # bool is an int subclass; quality=True is a bug, not "quality 1".
    if (
        isinstance(quality, bool)
        or not isinstance(quality, (int, np.integer))
        or not 1 <= quality <= 100
    ):
        raise ValueError(f"JPEG quality must be an integer in 1..100, got {quality!r}")
    _check_rgb(rgb)
    # OpenCV encoders read channel order as BGR.
    bgr = cv2.cvtColor(rgb, cv2.COLOR_RGB2BGR)
    ok, encoded = cv2.imencode(".jpg", bgr, [cv2.IMWRITE_JPEG_QUALITY, int(quality)])
    if not ok:
        raise ImageError(f"OpenCV failed to JPEG-encode an image of shape {rgb.shape}")
    msg = CompressedImage()
    msg.format = "jpeg"
    # bytes, not numpy: rclpy iterates numpy arrays element by element.
    msg.data = encoded.tobytes()
    return msg


def rgb_to_raw(rgb: np.ndarray) -> Image:
    """Wrap an RGB frame in an uncompressed ``Image`` (encoding "rgb8")."""
    _check_rgb(rgb)
    height, width, _ = rgb.shape
    msg = Image()
    msg.height = height
    msg.width = width
    msg.encoding = "rgb8"
    msg.is_bigendian = 0
    msg.step = width * 3
    # tobytes() also makes non-contiguous inputs (crops, flips) row-major.
    msg.data = rgb.tobytes()
    return msg


# ---------------------------------------------------------------------------
# message -> numpy


def _message_bytes(data: object) -> memoryview:
    """A zero-copy byte view of a message's ``data`` field."""
    try:
        view = memoryview(data)  # array.array('B') and bytes: no copy
    except TypeError:
        view = memoryview(bytes(data))  # a plain list from hand-built messages
    return view.cast("B") if view.format != "B" else view


def _describe(data: memoryview, fmt: str) -> str:
    return f"{len(data)} bytes starting {bytes(data[:8]).hex(' ') or '(none)'}, format {fmt!r}"


def _declared_codec(fmt: str) -> str | None:
    """ "jpeg", "png" or None (unknown) from an image_transport format string.

    image_transport writes e.g. "jpeg", "png", "rgb8; jpeg compressed bgr8",
    "bgr8; png compressed bgr8"; compressedDepth writes
    "16UC1; compressedDepth png", which is depth data, not a camera frame.
    """
    lowered = fmt.lower()
    if "compresseddepth" in lowered:
        return None
    codec_part = lowered.split(";")[-1]
    if "jpeg" in codec_part or "jpg" in codec_part:
        return "jpeg"
    if "png" in codec_part:
        return "png"
    return None


def _sniff_codec(data: memoryview) -> str | None:
    if bytes(data[:3]) == _JPEG_SOI:
        return "jpeg"
    if bytes(data[:8]) == _PNG_SIGNATURE:
        return "png"
    return None


def _jpeg_is_complete(data: memoryview) -> bool:
    # cv2.imdecode returns a partially grey image for a truncated JPEG without
    # an error, so completeness is checked here. Some UVC cameras pad MJPEG
    # frames with zeros after the EOI marker; tolerate that padding.
    tail = bytes(data[-64:]).rstrip(b"\x00")
    return tail.endswith(_JPEG_EOI)


def _png_is_complete(data: memoryview) -> bool:
    # The last chunk is IEND: 4-byte length, b"IEND", 4-byte CRC.
    return len(data) >= 12 and bytes(data[-8:-4]) == _PNG_IEND


# JPEG start-of-frame markers (baseline, progressive, lossless...; not DHT/JPG/DAC).
_JPEG_SOF = frozenset(range(0xC0, 0xD0)) - {0xC4, 0xC8, 0xCC}


def declared_size(data: memoryview, codec: str | None) -> tuple[int, int] | None:
    """(height, width) from the JPEG SOF or PNG IHDR header of ``codec`` data, read without
    decoding; None if not found.

    ``codec`` is what the magic bytes say (the caller sniffed them). Lets a
    decoder refuse a small file that declares an enormous image (a blank
    8 MB PNG decodes to gigabytes) before allocating anything.
    """
    raw = bytes(data[: 64 << 10])
    if codec == "png" and len(raw) >= 24 and raw[12:16] == b"IHDR":
        return int.from_bytes(raw[20:24], "big"), int.from_bytes(raw[16:20], "big")
    if codec == "jpeg":
        position = 2
        while position + 9 <= len(raw):
            if raw[position] != 0xFF:
                return None
            marker = raw[position + 1]
            if marker in _JPEG_SOF:
                return int.from_bytes(raw[position + 5 : position + 7], "big"), int.from_bytes(
                    raw[position + 7 : position + 9], "big"
                )
            position += 2 + int.from_bytes(raw[position + 2 : position + 4], "big")
    return None


@dataclass(frozen=True)
class CompressedFrame:
    """One CompressedImage's bytes with its codec read once.

    ``sniffed`` is what the magic bytes say, ``declared`` what the format
    string names (the sniffed codec when the format is empty); forwarding,
    the decompression-bomb header check and decoding all read these two
    instead of sniffing the data again.
    """

    data: memoryview
    fmt: str
    sniffed: str | None
    declared: str | None

    @classmethod
    def of(cls, msg: CompressedImage) -> CompressedFrame:
        data = _message_bytes(msg.data)
        sniffed = _sniff_codec(data)
        return cls(
            data,
            msg.format,
            sniffed,
            _declared_codec(msg.format) if msg.format.strip() else sniffed,
        )

    def is_complete_jpeg(self) -> bool:
        """True when this is a JPEG colour/mono frame that can be forwarded as is.

        Both the format string and the magic bytes must agree, so a
        mislabelled message is re-encoded rather than forwarded. A truncated
        JPEG is not forwarded: decoding it locally raises the ImageError on
        the robot, where the faulty camera is.
        """
        return self.declared == "jpeg" and self.sniffed == "jpeg" and _jpeg_is_complete(self.data)

    def to_rgb(
        self,
        max_bytes: int | None = None,
        max_pixels: int | None = None,
        at_least: tuple[int, int] | None = None,
    ) -> np.ndarray:
        """Decode into an HxWx3 uint8 RGB array; see ``compressed_to_rgb``."""
        data, fmt, declared = self.data, self.fmt, self.declared
        if len(data) == 0:
            raise ImageError(
                f"expected JPEG or PNG data, got an empty CompressedImage (format {fmt!r})"
            )
        if max_bytes is not None and len(data) > max_bytes:
            raise ImageError(
                f"expected a compressed image of at most {max_bytes} bytes, got {len(data)} bytes "
                f"(format {fmt!r})"
            )
        if declared is None:
            raise ImageError(
                f"expected a JPEG or PNG camera frame (format 'jpeg', 'png' or image_transport's "
                f"'<enc>; jpeg compressed <enc>'), got {_describe(data, fmt)}"
            )
        if self.sniffed != declared:
            raise ImageError(
                f"expected {declared.upper()} data as the format says, got {_describe(data, fmt)}"
            )
        if declared == "jpeg" and not _jpeg_is_complete(data):
            raise ImageError(
                f"expected a complete JPEG ending with the EOI marker ff d9, got {len(data)} "
                "bytes ending "
                f"{bytes(data[-8:]).hex(' ')} (truncated?), format {fmt!r}"
            )
        if declared == "png" and not _png_is_complete(data):
            raise ImageError(
                f"expected a complete PNG ending with an IEND chunk, got {len(data)} bytes ending "
                f"{bytes(data[-12:]).hex(' ')} (truncated?), format {fmt!r}"
            )
        size = (
            declared_size(data, self.sniffed)
            if max_pixels is not None or at_least is not None
            else None
        )
        if max_pixels is not None:
            if size is None:
                raise ImageError(
                    f"expected a {declared.upper()} header declaring the image size, found none "
                    f"in {_describe(data, fmt)}"
                )
            if size[0] * size[1] > max_pixels:
                raise ImageError(
                    f"expected an image of at most {max_pixels} pixels, got a {declared.upper()} "
                    "declaring "
                    f"{size[0]}x{size[1]} = {size[0] * size[1]} pixels"
                )
        # IMREAD_UNCHANGED so 16-bit PNGs are seen (and refused) rather than
        # silently scaled to 8 bits, and alpha/gray are converted explicitly.
        # A JPEG only ever holds 8-bit samples, so a reduced decode (which
        # always yields BGR) loses nothing that the full one would refuse.
        flag = cv2.IMREAD_UNCHANGED
        if declared == "jpeg" and size is not None and at_least is not None:
            flag = _REDUCED_DECODE.get(jpeg_scale_denominator(size, at_least), flag)
        decoded = cv2.imdecode(np.frombuffer(data, dtype=np.uint8), flag)
        if decoded is None:
            raise ImageError(
                f"expected decodable {declared.upper()} data, OpenCV could not decode "
                f"{_describe(data, fmt)}"
            )
        if decoded.dtype != np.uint8:
            raise ImageError(
                f"expected an 8-bit camera frame, got a {decoded.dtype} image from "
                f"{_describe(data, fmt)}"
            )
        channels = 1 if decoded.ndim == 2 else decoded.shape[2]
        if channels == 1:
            return cv2.cvtColor(decoded.reshape(decoded.shape[:2]), cv2.COLOR_GRAY2RGB)
        # OpenCV decodes to BGR(A) whatever image_transport's "compressed bgr8"
        # suffix says: the codec stores colours, not a channel order.
        if channels == 3:
            return cv2.cvtColor(decoded, cv2.COLOR_BGR2RGB)
        if channels == 4:
            return cv2.cvtColor(decoded, cv2.COLOR_BGRA2RGB)
        raise ImageError(
            f"expected 1, 3 or 4 channels, got {channels} from {_describe(data, fmt)}"
        )


# libjpeg scales in the DCT domain by 1/2, 1/4 or 1/8 while decoding: it
# skips most of the inverse transform, far cheaper than decoding at full size
# and shrinking afterwards.
_REDUCED_DECODE = {
    2: cv2.IMREAD_REDUCED_COLOR_2,
    4: cv2.IMREAD_REDUCED_COLOR_4,
    8: cv2.IMREAD_REDUCED_COLOR_8,
}


def jpeg_scale_denominator(size: tuple[int, int], at_least: tuple[int, int]) -> int:
    """The largest of 1, 2, 4, 8 whose JPEG DCT-scaled decode of ``size`` is still at least
    ``at_least``.

    libjpeg's scaled size is the ceiling of size / denominator in each
    dimension; the caller then resizes the (still larger or equal) frame to
    the exact target, so no pixel is ever invented by upscaling.
    """
    (height, width), (want_height, want_width) = size, at_least
    for denominator in (8, 4, 2):
        if -(-height // denominator) >= want_height and -(-width // denominator) >= want_width:
            return denominator
    return 1


def is_jpeg(msg: CompressedImage) -> bool:
    """True when ``msg`` holds a complete JPEG frame that can be forwarded as is
    (``CompressedFrame.is_complete_jpeg``)."""
    return CompressedFrame.of(msg).is_complete_jpeg()


def compressed_to_rgb(
    msg: CompressedImage,
    max_bytes: int | None = None,
    max_pixels: int | None = None,
    at_least: tuple[int, int] | None = None,
) -> np.ndarray:
    """Decode a JPEG or PNG ``CompressedImage`` into an HxWx3 uint8 RGB array.

    ``max_bytes`` bounds the compressed size accepted, ``max_pixels`` the
    decoded size the header declares (None: no bound).
    An empty ``format`` is allowed; the codec is then read from the data.
    ``at_least`` (height, width): the frame is only needed at that size, so
    a JPEG may come back smaller than it was sent, decoded at 1/2, 1/4 or
    1/8 scale (``jpeg_scale_denominator``), never below ``at_least``; the
    caller resizes (``resize_rgb``) to the exact size.
    """
    return CompressedFrame.of(msg).to_rgb(max_bytes, max_pixels, at_least)


def raw_to_rgb(msg: Image, max_bytes: int | None = None) -> np.ndarray:
    """Convert an uncompressed ``Image`` into an HxWx3 uint8 RGB array.

    ``max_bytes`` bounds the data accepted (None: no bound), checked first.
    For an unpadded "rgb8" message the result is a read-only view of
    ``msg.data`` (no copy); copy it before writing to it. Every other
    encoding, and padded rows, produce a new contiguous array.
    """
    encoding = msg.encoding
    data = _message_bytes(msg.data)
    if max_bytes is not None and len(data) > max_bytes:
        raise ImageError(
            f"got a raw {encoding!r} Image of {len(data)} bytes; at most {max_bytes} are accepted"
        )
    channels = _RAW_ENCODING_CHANNELS.get(encoding)
    if channels is None:
        raise ImageError(
            f"expected an Image encoding in {list(ACCEPTED_RAW_ENCODINGS)}, got {encoding!r}"
        )
    height, width, step = int(msg.height), int(msg.width), int(msg.step)
    if height <= 0 or width <= 0:
        raise ImageError(
            f"expected a positive Image size, got height {height} width {width} ({encoding})"
        )
    row_bytes = width * channels
    if step < row_bytes:
        raise ImageError(
            f"expected step >= width*channels = {width}*{channels} = {row_bytes} for {encoding}, "
            f"got step {step}"
        )
    if len(data) != step * height:
        raise ImageError(
            f"expected step*height = {step}*{height} = {step * height} data bytes for a "
            f"{width}x{height} "
            f"{encoding} Image, got {len(data)}"
        )
    rows = np.frombuffer(data, dtype=np.uint8).reshape(height, step)
    # drops row padding, still a view
    pixels = rows[:, :row_bytes].reshape(height, width, channels)
    if encoding == "rgb8":
        if step != row_bytes:
            return np.ascontiguousarray(pixels)
        # Read-only so a caller cannot scribble on the message it came from.
        pixels.flags.writeable = False
        return pixels
    source = pixels[:, :, 0] if channels == 1 else pixels
    return cv2.cvtColor(source, _TO_RGB[encoding])


def image_message_to_rgb(
    msg: Image | CompressedImage,
    max_bytes: int | None = None,
    max_pixels: int | None = None,
    at_least: tuple[int, int] | None = None,
) -> np.ndarray:
    """Either image message type to an HxWx3 uint8 RGB array.

    ``max_bytes`` bounds the data as it arrived (compressed or raw),
    ``max_pixels`` what a compressed frame's header declares; None: no bound.
    ``at_least``: see ``compressed_to_rgb`` (a raw frame comes back at its own size).
    """
    if isinstance(msg, CompressedImage):
        return compressed_to_rgb(msg, max_bytes, max_pixels, at_least)
    if isinstance(msg, Image):
        return raw_to_rgb(msg, max_bytes)
    raise ImageError(f"expected a sensor_msgs Image or CompressedImage, got {type(msg).__name__}")


def frame_size(msg: Image | CompressedImage) -> tuple[int, int] | None:
    """(height, width) of a frame without decoding it: the Image's fields, a compressed header's
    declaration; None if unknown."""
    if isinstance(msg, CompressedImage):
        frame = CompressedFrame.of(msg)
        return declared_size(frame.data, frame.sniffed)
    return int(msg.height), int(msg.width)


def frame_at_size(
    msg: Image | CompressedImage,
    size: tuple[int, int],
    max_bytes: int | None = None,
    max_pixels: int | None = None,
) -> np.ndarray:
    """The frame as a policy trained at ``size`` (height, width) sees it: decoded, then resized in
    uint8.

    The one resize both ends apply (the robot before encoding, the server
    after decoding), so the policy gets the same pixels within JPEG error
    whichever end did it. A JPEG larger than ``size`` is decoded at a reduced
    DCT scale first (``compressed_to_rgb``'s ``at_least``). Bounds as
    ``image_message_to_rgb``.
    """
    return resize_rgb(image_message_to_rgb(msg, max_bytes, max_pixels, at_least=size), *size)


# ---------------------------------------------------------------------------
# numpy -> numpy


def resize_rgb(rgb: np.ndarray, height: int, width: int) -> np.ndarray:
    """Resize an RGB frame to ``height`` x ``width``.

    INTER_AREA when shrinking (bilinear aliases badly on downscale),
    bilinear when enlarging (INTER_AREA degrades to nearest there).
    Returns the input unchanged when it already has that size.
    """
    _check_rgb(rgb)
    if height <= 0 or width <= 0:
        raise ValueError(f"expected a positive target size, got height {height} width {width}")
    source_height, source_width = rgb.shape[:2]
    if (source_height, source_width) == (height, width):
        return rgb
    shrinking = height <= source_height and width <= source_width
    interpolation = cv2.INTER_AREA if shrinking else cv2.INTER_LINEAR
    return cv2.resize(rgb, (width, height), interpolation=interpolation)
