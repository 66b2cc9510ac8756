"""`strom transactions`, Kafka's kafka-transactions.sh: list and describe what
the coordinator knows of confluent-kafka's transactional producers, read a
partition's producers, and find and abort the hanging transaction a producer
leaves when nothing verified its partition (a broker without KIP-890's check,
as before Kafka 3.6), which holds back every read_committed consumer until
the abort.
"""

from __future__ import annotations

from confluent_kafka import OFFSET_BEGINNING, Producer, TopicPartition

from harness import (
    admin_cli,
    admin_ok,
    assert_one_line_error,
    confluent_consumer,
    confluent_producer,
    create_topic,
    high_watermarks,
    wait_until,
)
import wire
from wire import transactional_batch, transactional_produce

TIMEOUT_S = 60


def table(output: str) -> list[list[str]]:
    """Kafka's prettyPrintTable: a header line, then rows of tab-ended padded cells."""
    lines = output.splitlines()
    assert lines, "no header line"
    return [[cell.strip() for cell in line.split("\t")[:-1]] for line in lines]


def transactions(broker, *args: str) -> list[list[str]]:
    return table(admin_ok(broker, "transactions", *args))


def test_list_describe_and_producers_of_a_confluent_transaction(broker):
    create_topic(broker.bootstrap, "orders", 2)
    producer = Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": "cli-tx"})
    producer.init_transactions(TIMEOUT_S)
    producer.begin_transaction()
    for partition in (0, 1):
        producer.produce("orders", value=b"pending", partition=partition)
    assert producer.flush(TIMEOUT_S) == 0

    header, *rows = transactions(broker, "list")
    assert header == ["TransactionalId", "Coordinator", "ProducerId", "TransactionState"]
    [(transactional_id, coordinator, producer_id, state)] = rows
    assert (transactional_id, coordinator, state) == ("cli-tx", "1", "Ongoing")
    assert transactions(broker, "list", "--transactional-id-pattern", "cli-.*")[1:] == rows
    assert transactions(broker, "list", "--transactional-id-pattern", "cli")[1:] == [], "a whole-id match"
    assert transactions(broker, "list", "--duration-filter", "3600000")[1:] == []
    assert_one_line_error(
        admin_cli(broker, "transactions", "list", "--transactional-id-pattern", "cli-("),
        "INVALID_REGULAR_EXPRESSION",
    )

    header, described = transactions(broker, "describe", "--transactional-id", "cli-tx")
    assert header[0] == "CoordinatorId" and header[-1] == "TopicPartitions"
    assert described[:5] == ["1", "cli-tx", producer_id, "0", "Ongoing"]
    assert int(described[6]) > 0 and int(described[7]) >= 0, "start time and duration"
    assert sorted(described[8].split(",")) == ["orders-0", "orders-1"]

    header, *producers = transactions(broker, "describe-producers", "--topic", "orders", "--partition", "1")
    assert header[-1] == "CurrentTransactionStartOffset"
    assert [(p[0], p[1], p[5]) for p in producers] == [(producer_id, "0", "0")]

    # The coordinator counts both partitions in the transaction: none hangs.
    assert transactions(broker, "find-hanging", "--topic", "orders", "--max-transaction-timeout", "0")[1:] == []

    producer.commit_transaction(TIMEOUT_S)
    assert transactions(broker, "describe", "--transactional-id", "cli-tx")[1][4] == "CompleteCommit"
    assert_one_line_error(
        admin_cli(broker, "transactions", "describe", "--transactional-id", "nobody"),
        "transactional-id `nobody`",
        "TRANSACTIONAL_ID_NOT_FOUND",
    )


def test_find_hanging_and_abort_free_read_committed_consumers(broker_factory):
    # As a broker before KIP-890 did: transactional batches need no verification.
    broker = broker_factory(transaction_partition_verification_enable=False)
    create_topic(broker.bootstrap, "orders", 2)
    wire.find_coordinator(broker.port, "old-client", key_type=1)
    init = wire.init_producer_id(broker.port, 4, transactional_id="old-client")
    assert init.error_code == wire.NONE, init
    pid, epoch = init.producer_id, init.producer_epoch
    for partition in (0, 1):
        batch = transactional_batch(pid, epoch, b"hanging")
        assert transactional_produce(broker.port, "old-client", "orders", partition, batch) == wire.NONE
    plain = confluent_producer(broker.bootstrap)
    for partition in (0, 1):
        plain.produce("orders", value=b"after", partition=partition)
    assert plain.flush(TIMEOUT_S) == 0
    partitions = [("orders", 0), ("orders", 1)]
    assert high_watermarks(broker.bootstrap, partitions, "read_uncommitted") == {tp: 2 for tp in partitions}
    assert high_watermarks(broker.bootstrap, partitions, "read_committed") == {tp: 0 for tp in partitions}

    def hanging(*scope: str) -> list[list[str]]:
        return transactions(broker, "find-hanging", *scope, "--max-transaction-timeout", "0")[1:]

    default_timeout = transactions(broker, "find-hanging", "--topic", "orders")[1:]
    assert default_timeout == [], "a transaction may run 15 minutes before it counts as hanging"
    wait_until(lambda: len(hanging("--topic", "orders")) == 2, TIMEOUT_S, "both hanging transactions found")
    rows = sorted(hanging("--broker-id", "1"))
    assert [(r[0], r[1], r[2], r[3], r[5]) for r in rows] == [
        ("orders", "0", str(pid), str(epoch), "0"),
        ("orders", "1", str(pid), str(epoch), "0"),
    ]
    assert hanging("--topic", "orders", "--partition", "1") == [rows[1]]
    assert_one_line_error(admin_cli(broker, "transactions", "find-hanging"), "--topic or --broker-id")

    assert_one_line_error(
        admin_cli(broker, "transactions", "abort", "--topic", "orders", "--partition", "0", "--start-offset", "1"),
        "Could not find any open transactions starting at offset 1 on partition orders-0",
    )
    admin_ok(broker, "transactions", "abort", "--topic", "orders", "--partition", "0", "--start-offset", "0")
    admin_ok(
        broker, "transactions", "abort", "--topic", "orders", "--partition", "1",
        "--producer-id", str(pid), "--producer-epoch", str(epoch), "--coordinator-epoch", "-1",
    )
    assert hanging("--topic", "orders") == []
    # The abort markers sit at offset 2: the stable offset passes them.
    assert high_watermarks(broker.bootstrap, partitions, "read_committed") == {tp: 3 for tp in partitions}
    reader = confluent_consumer(broker.bootstrap, **{"isolation.level": "read_committed"})
    try:
        reader.assign([TopicPartition("orders", p, OFFSET_BEGINNING) for p in (0, 1)])
        values: list[bytes] = []
        wait_until(
            lambda: values.extend(m.value() for m in reader.consume(10, timeout=0.5) if m.error() is None)
            or len(values) >= 2,
            TIMEOUT_S,
            "read_committed records",
        )
        assert values == [b"after", b"after"], "the aborted records are skipped"
    finally:
        reader.close()
