//! Partition state and leadership: DescribeTopicPartitions (KIP-966), with
//! Metadata as the fallback for brokers without it.

use std::collections::BTreeSet;

use kafka_protocol::messages::describe_topic_partitions_request::{Cursor, TopicRequest};
use kafka_protocol::messages::describe_topic_partitions_response::{
    Cursor as NextCursor, DescribeTopicPartitionsResponseTopic,
};
use kafka_protocol::messages::{
    ApiKey, BrokerId, DescribeTopicPartitionsRequest, DescribeTopicPartitionsResponse,
};
use uuid::Uuid;

use super::{topic_name, Admin, ItemResult};
use crate::cluster::TopicInfo;
use crate::error::{Error, Result};

/// The most partitions one DescribeTopicPartitions answer is asked for, as
/// the Java admin client asks (`partitionSizeLimitPerResponse`).
const PARTITIONS_PER_PAGE: i32 = 2000;

/// Pages fetched at most for one description: every page holds at least one
/// partition, so this bounds the loop well above any real cluster.
const PAGES_MAX: usize = 1_000_000;

/// A topic as DescribeTopicPartitions describes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TopicDescription {
    pub name: String,
    pub topic_id: Uuid,
    pub is_internal: bool,
    /// KIP-430's bit set of the principal's operations on the topic, when
    /// the broker said.
    pub authorized_operations: Option<i32>,
    /// Ordered by partition number.
    pub partitions: Vec<PartitionDescription>,
}

/// One partition's leadership and replicas.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PartitionDescription {
    pub partition: i32,
    /// `None` while the partition has no leader.
    pub leader: Option<i32>,
    pub leader_epoch: i32,
    pub replicas: Vec<i32>,
    pub isr: Vec<i32>,
    /// Eligible leader replicas; `None` when the broker described the
    /// partition through Metadata, which does not carry them.
    pub elr: Option<Vec<i32>>,
    pub last_known_elr: Option<Vec<i32>>,
    pub offline_replicas: Vec<i32>,
}

impl Admin {
    /// Partitions, leaders, replicas, ISR and eligible leader replicas of each
    /// named topic (all topics when `names` is empty), in name order, through
    /// DescribeTopicPartitions; through Metadata when the broker lacks it.
    pub async fn describe_topic_partitions(
        &self,
        names: &[String],
    ) -> Result<Vec<ItemResult<TopicDescription>>> {
        let connection = self.cluster.any_connection().await?;
        if connection.version(ApiKey::DescribeTopicPartitions).is_err() {
            return Ok(self.describe_topics(names).await?.into_iter().map(from_metadata).collect());
        }
        let names: BTreeSet<&String> = names.iter().collect();
        let topics: Vec<TopicRequest> =
            names.iter().map(|n| TopicRequest::default().with_name(topic_name(n))).collect();
        let mut pages = Pages::default();
        let mut cursor: Option<Cursor> = None;
        for _ in 0..PAGES_MAX {
            let request = DescribeTopicPartitionsRequest::default()
                .with_topics(topics.clone())
                .with_response_partition_limit(PARTITIONS_PER_PAGE)
                .with_cursor(cursor.take());
            let response = self
                .cluster
                .with_retries("DescribeTopicPartitions", || async {
                    self.cluster.any_connection().await?.send(&request).await
                })
                .await?;
            let Some(next) = pages.add(response) else { return Ok(pages.items) };
            let same =
                |c: &Cursor| c.topic_name == next.topic_name && c.partition_index == next.partition_index;
            if request.cursor.as_ref().is_some_and(same) {
                let reason = format!("DescribeTopicPartitions made no progress at {}", next.topic_name.0);
                return Err(Error::Protocol { addr: connection.addr().to_owned(), reason });
            }
            cursor = Some(
                Cursor::default().with_topic_name(next.topic_name).with_partition_index(next.partition_index),
            );
        }
        let reason = "DescribeTopicPartitions did not finish".to_owned();
        Err(Error::Protocol { addr: connection.addr().to_owned(), reason })
    }
}

/// Topics gathered from DescribeTopicPartitions pages; a topic split over two
/// pages is one item.
#[derive(Default)]
struct Pages {
    items: Vec<ItemResult<TopicDescription>>,
}

impl Pages {
    /// Adds a page's topics and returns where the next page starts.
    fn add(&mut self, response: DescribeTopicPartitionsResponse) -> Option<NextCursor> {
        for topic in response.topics {
            let item = topic_item(topic);
            match (self.items.last_mut(), &item.result) {
                (Some(ItemResult { name, result: Ok(last) }), Ok(more)) if *name == item.name => {
                    last.partitions.extend(more.partitions.iter().cloned())
                }
                _ => self.items.push(item),
            }
        }
        response.next_cursor
    }
}

fn topic_item(topic: DescribeTopicPartitionsResponseTopic) -> ItemResult<TopicDescription> {
    let name = topic.name.as_ref().map_or_else(String::new, |n| n.0.to_string());
    if let Some(error) = Error::from_code(topic.error_code, None) {
        return ItemResult { name, result: Err(error) };
    }
    let ids = |ids: Vec<BrokerId>| ids.into_iter().map(|id| id.0).collect::<Vec<i32>>();
    let mut partitions: Vec<PartitionDescription> = topic
        .partitions
        .into_iter()
        .map(|p| PartitionDescription {
            partition: p.partition_index,
            leader: (p.leader_id.0 >= 0).then_some(p.leader_id.0),
            leader_epoch: p.leader_epoch,
            replicas: ids(p.replica_nodes),
            isr: ids(p.isr_nodes),
            elr: p.eligible_leader_replicas.map(ids),
            last_known_elr: p.last_known_elr.map(ids),
            offline_replicas: ids(p.offline_replicas),
        })
        .collect();
    partitions.sort_by_key(|p| p.partition);
    let description = TopicDescription {
        name: name.clone(),
        topic_id: topic.topic_id,
        is_internal: topic.is_internal,
        authorized_operations: (topic.topic_authorized_operations != i32::MIN)
            .then_some(topic.topic_authorized_operations),
        partitions,
    };
    ItemResult { name, result: Ok(description) }
}

/// A Metadata description in DescribeTopicPartitions' shape, without the
/// eligible leader replicas Metadata does not carry.
fn from_metadata(item: ItemResult<std::sync::Arc<TopicInfo>>) -> ItemResult<TopicDescription> {
    let result = item.result.map(|topic| TopicDescription {
        name: topic.name.clone(),
        topic_id: topic.topic_id,
        is_internal: topic.is_internal,
        authorized_operations: None,
        partitions: topic
            .partitions
            .iter()
            .map(|p| PartitionDescription {
                partition: p.partition,
                leader: (p.leader >= 0).then_some(p.leader),
                leader_epoch: p.leader_epoch,
                replicas: p.replicas.clone(),
                isr: p.isr.clone(),
                elr: None,
                last_known_elr: None,
                offline_replicas: p.offline_replicas.clone(),
            })
            .collect(),
    });
    ItemResult { name: item.name, result }
}

#[cfg(test)]
mod tests {
    use kafka_protocol::messages::describe_topic_partitions_response::DescribeTopicPartitionsResponsePartition;

    use super::*;

    fn partition(index: i32, leader: i32) -> DescribeTopicPartitionsResponsePartition {
        DescribeTopicPartitionsResponsePartition::default()
            .with_partition_index(index)
            .with_leader_id(BrokerId(leader))
            .with_replica_nodes(vec![BrokerId(1), BrokerId(2)])
            .with_isr_nodes(vec![BrokerId(1)])
            .with_eligible_leader_replicas(Some(vec![BrokerId(2)]))
            .with_last_known_elr(Some(vec![]))
    }

    fn topic(
        name: &str,
        partitions: Vec<DescribeTopicPartitionsResponsePartition>,
    ) -> DescribeTopicPartitionsResponseTopic {
        DescribeTopicPartitionsResponseTopic::default()
            .with_name(Some(topic_name(name)))
            .with_partitions(partitions)
            .with_topic_authorized_operations(i32::MIN)
    }

    #[test]
    fn a_topic_split_over_two_pages_is_one_description() {
        let mut pages = Pages::default();
        let next = NextCursor::default().with_topic_name(topic_name("a")).with_partition_index(1);
        let first = DescribeTopicPartitionsResponse::default()
            .with_topics(vec![topic("a", vec![partition(0, 1)])])
            .with_next_cursor(Some(next.clone()));
        assert_eq!(pages.add(first), Some(next));
        let second = DescribeTopicPartitionsResponse::default()
            .with_topics(vec![topic("a", vec![partition(1, -1)]), topic("b", vec![partition(0, 2)])]);
        assert_eq!(pages.add(second), None);
        let names: Vec<&str> = pages.items.iter().map(|i| i.name.as_str()).collect();
        assert_eq!(names, ["a", "b"]);
        let a = pages.items[0].result.as_ref().unwrap();
        assert_eq!(a.partitions.len(), 2);
        assert_eq!(a.partitions[1].leader, None, "leader -1 is no leader");
        assert_eq!(a.partitions[0].elr, Some(vec![2]));
        assert_eq!(a.authorized_operations, None);
    }

    #[test]
    fn a_topic_error_is_an_error_item() {
        let mut pages = Pages::default();
        let unknown = topic("gone", vec![]).with_error_code(3);
        pages.add(DescribeTopicPartitionsResponse::default().with_topics(vec![unknown]));
        let error = pages.items[0].result.as_ref().unwrap_err();
        assert_eq!(error.kafka_code().map(|c| c.code()), Some(3));
    }
}
