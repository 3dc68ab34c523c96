"""Each client's topics: created once, kept on re-open, destroyed only by their session (no
ROS)."""

import threading
import time

from lerobot_ros.server.sessions.client_topics import ClientTopics, ClientTopicTable


class FakeSubscription:
    def __init__(self, client_id):
        self.client_id = client_id
        self.publishers = 1

    def get_publisher_count(self):
        return self.publishers


class FakePublisher:
    def __init__(self):
        self.published = []

    def publish(self, msg):
        self.published.append(msg)


class FakeNode:
    """Stands in for the rclpy node at the ROS boundary: counts what it creates and destroys."""

    def __init__(self):
        self.created: list[str] = []
        self.destroyed: list[ClientTopics] = []

    def create(self, client_id):
        self.created.append(client_id)
        return FakeSubscription(client_id), FakePublisher()

    def destroy(self, topics):
        self.destroyed.append(topics)


def table():
    node = FakeNode()
    return node, ClientTopicTable(node.create, node.destroy)


def test_first_session_creates_the_topics_and_reopening_keeps_them():
    node, topics = table()
    first = topics.open("arm", "s1")
    second = topics.open("arm", "s2")
    assert node.created == ["arm"]
    assert (second.subscription, second.publisher) == (first.subscription, first.publisher)
    assert (first.session_id, second.session_id) == ("s1", "s2")


def test_only_the_session_owning_the_topics_destroys_them():
    node, topics = table()
    topics.open("arm", "s1")
    current = topics.open("arm", "s2")
    assert topics.close("arm", "s1") is False, "a late close of the replaced session"
    assert node.destroyed == [] and topics.publisher_count("arm") == 1
    assert topics.close("arm", "s2") is True
    assert node.destroyed == [current]
    assert topics.close("arm", "s2") is False, "closing twice destroys once"
    assert topics.open("arm", "s3").subscription is not current.subscription
    assert node.created == ["arm", "arm"]


def test_publish_reaches_the_clients_own_topic_and_nothing_after_close():
    node, topics = table()
    arm, other = topics.open("arm", "s1"), topics.open("other", "s9")
    topics.publish("arm", "chunk 1")
    topics.close("arm", "s1")
    topics.publish("arm", "chunk 2")
    topics.publish("nobody", "chunk 3")
    assert arm.publisher.published == ["chunk 1"] and other.publisher.published == []


def test_publisher_count_is_zero_without_topics():
    node, topics = table()
    assert topics.publisher_count("arm") == 0
    opened = topics.open("arm", "s1")
    opened.subscription.publishers = 2
    assert topics.publisher_count("arm") == 2


def test_a_publisher_is_never_destroyed_mid_publish():
    in_publish = threading.Event()
    release = threading.Event()
    destroyed_during_publish = []

    class SlowPublisher(FakePublisher):
        def publish(self, msg):
            in_publish.set()
            release.wait(5)
            destroyed_during_publish.append(bool(node.destroyed))

    node = FakeNode()
    topics = ClientTopicTable(
        lambda client_id: (FakeSubscription(client_id), SlowPublisher()), node.destroy
    )
    topics.open("arm", "s1")
    publisher = threading.Thread(target=topics.publish, args=("arm", "chunk"))
    publisher.start()
    in_publish.wait(5)
    closer = threading.Thread(target=topics.close, args=("arm", "s1"))
    closer.start()
    time.sleep(0.1)  # the closer is now waiting on the lock the publish holds
    release.set()
    publisher.join(5)
    closer.join(5)
    assert destroyed_during_publish == [False] and len(node.destroyed) == 1
