//! Placeholder until the assignors land.

use std::collections::BTreeMap;

use bytes::Bytes;

use super::protocol::{Assignment, Subscription, TopicPartition};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RebalanceProtocol {
    Eager,
    Cooperative,
}

pub struct Member {
    pub member_id: String,
    pub group_instance_id: Option<String>,
    pub subscription: Subscription,
}

pub trait Assignor: Send + Sync {
    fn name(&self) -> &'static str;
    fn protocol(&self) -> RebalanceProtocol;
    fn assign(
        &self,
        partitions_per_topic: &BTreeMap<String, i32>,
        members: &[Member],
    ) -> BTreeMap<String, Assignment>;
    fn subscription_user_data(&self, _owned: &[TopicPartition], _generation: i32) -> Option<Bytes> {
        None
    }
}

struct Range;

impl Assignor for Range {
    fn name(&self) -> &'static str {
        "range"
    }
    fn protocol(&self) -> RebalanceProtocol {
        RebalanceProtocol::Eager
    }
    fn assign(
        &self,
        partitions_per_topic: &BTreeMap<String, i32>,
        members: &[Member],
    ) -> BTreeMap<String, Assignment> {
        let mut out: BTreeMap<String, Assignment> =
            members.iter().map(|m| (m.member_id.clone(), Assignment::default())).collect();
        for (topic, &count) in partitions_per_topic {
            let mut subscribed: Vec<&str> = members
                .iter()
                .filter(|m| m.subscription.topics.contains(topic))
                .map(|m| m.member_id.as_str())
                .collect();
            subscribed.sort();
            if subscribed.is_empty() {
                continue;
            }
            let n = subscribed.len() as i32;
            let (per, extra) = (count / n, count % n);
            let mut next = 0;
            for (i, member) in subscribed.iter().enumerate() {
                let take = per + i32::from((i as i32) < extra);
                for p in next..next + take {
                    out.get_mut(*member)
                        .unwrap()
                        .partitions
                        .push(TopicPartition { topic: topic.clone(), partition: p });
                }
                next += take;
            }
        }
        out
    }
}

pub fn by_name(name: &str) -> Option<Box<dyn Assignor>> {
    match name {
        "range" | "cooperative-sticky" => Some(Box::new(Range)),
        _ => None,
    }
}
