//! The interruption queue: EventBridge messages in SQS (spot interruption warning, rebalance
//! recommendation, AWS Health scheduled change, instance state change), as Karpenter's
//! interruption controller reads them.

use capstan_cloud::InstanceState;
use serde::Deserialize;
use std::time::Duration;

/// What a message says, before the instance id is matched to a provider id.
#[derive(Clone, Debug, PartialEq)]
pub enum Notice {
    SpotInterruption {
        instance_id: String,
    },
    Rebalance {
        instance_id: String,
    },
    /// AWS Health: a scheduled change to these instances.
    ScheduledChange {
        instance_ids: Vec<String>,
    },
    StateChange {
        instance_id: String,
        state: InstanceState,
    },
    /// A well-formed event capstan does not act on (another state, another Health category).
    Ignored,
}

/// A parsed message: what it says and when EventBridge emitted it (unix time).
#[derive(Clone, Debug, PartialEq)]
pub struct Message {
    pub notice: Notice,
    pub at: Duration,
}

#[derive(Deserialize)]
struct Envelope {
    #[serde(rename = "detail-type")]
    detail_type: String,
    source: String,
    time: String,
    #[serde(default)]
    detail: serde_json::Value,
}

fn instance_id(detail: &serde_json::Value) -> Result<String, String> {
    detail
        .get("instance-id")
        .and_then(|v| v.as_str())
        .filter(|s| s.starts_with("i-"))
        .map(String::from)
        .ok_or_else(|| "detail.instance-id is missing".into())
}

/// Parses one message body. An `Err` is a malformed message: count it and delete it.
pub fn parse(body: &str) -> Result<Message, String> {
    let e: Envelope =
        serde_json::from_str(body).map_err(|e| format!("not an EventBridge event: {e}"))?;
    let at = parse_time(&e.time).ok_or_else(|| format!("time {:?} is not RFC 3339", e.time))?;
    let notice = match (e.source.as_str(), e.detail_type.as_str()) {
        ("aws.ec2", "EC2 Spot Instance Interruption Warning") => Notice::SpotInterruption {
            instance_id: instance_id(&e.detail)?,
        },
        ("aws.ec2", "EC2 Instance Rebalance Recommendation") => Notice::Rebalance {
            instance_id: instance_id(&e.detail)?,
        },
        ("aws.ec2", "EC2 Instance State-change Notification") => {
            let id = instance_id(&e.detail)?;
            let state = e
                .detail
                .get("state")
                .and_then(|v| v.as_str())
                .ok_or("detail.state is missing")?;
            match state {
                "stopping" | "stopped" | "shutting-down" => Notice::StateChange {
                    instance_id: id,
                    state: InstanceState::ShuttingDown,
                },
                "terminated" => Notice::StateChange {
                    instance_id: id,
                    state: InstanceState::Terminated,
                },
                _ => Notice::Ignored,
            }
        }
        ("aws.health", "AWS Health Event") => {
            let category = e.detail.get("eventTypeCategory").and_then(|v| v.as_str());
            let service = e.detail.get("service").and_then(|v| v.as_str());
            if category != Some("scheduledChange") || service != Some("EC2") {
                Notice::Ignored
            } else {
                let ids: Vec<String> = e
                    .detail
                    .get("affectedEntities")
                    .and_then(|v| v.as_array())
                    .ok_or("detail.affectedEntities is missing")?
                    .iter()
                    .filter_map(|x| x.get("entityValue").and_then(|v| v.as_str()))
                    .filter(|s| s.starts_with("i-"))
                    .map(String::from)
                    .collect();
                if ids.is_empty() {
                    return Err("detail.affectedEntities names no instance".into());
                }
                Notice::ScheduledChange { instance_ids: ids }
            }
        }
        (s, d) => return Err(format!("unknown event {s}/{d:?}")),
    };
    Ok(Message { notice, at })
}

/// RFC 3339 time (`2026-12-01T16:08:09Z`, fractions and offsets allowed) as unix time.
pub fn parse_time(s: &str) -> Option<Duration> {
    let t = aws_smithy_types::DateTime::from_str(s, aws_smithy_types::date_time::Format::DateTime)
        .ok()?;
    let secs = t.secs();
    if secs < 0 {
        return None;
    }
    Some(Duration::new(secs as u64, t.subsec_nanos()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(source: &str, detail_type: &str, detail: serde_json::Value) -> String {
        serde_json::json!({
            "version": "0", "id": "7e5bd8d0-1", "detail-type": detail_type, "source": source,
            "account": "123456789012", "time": "2026-12-01T16:00:00Z", "region": "us-east-1",
            "resources": ["arn:aws:ec2:us-east-1:123456789012:instance/i-0abc"], "detail": detail
        })
        .to_string()
    }

    #[test]
    fn eventbridge_messages_become_notices_and_malformed_ones_are_errors() {
        let id = || "i-0abc".to_string();
        let cases: Vec<(String, Result<Notice, &str>)> = vec![
            (
                event(
                    "aws.ec2",
                    "EC2 Spot Instance Interruption Warning",
                    serde_json::json!({"instance-id": "i-0abc", "instance-action": "terminate"}),
                ),
                Ok(Notice::SpotInterruption { instance_id: id() }),
            ),
            (
                event(
                    "aws.ec2",
                    "EC2 Instance Rebalance Recommendation",
                    serde_json::json!({"instance-id": "i-0abc"}),
                ),
                Ok(Notice::Rebalance { instance_id: id() }),
            ),
            (
                event(
                    "aws.ec2",
                    "EC2 Instance State-change Notification",
                    serde_json::json!({"instance-id": "i-0abc", "state": "stopping"}),
                ),
                Ok(Notice::StateChange {
                    instance_id: id(),
                    state: InstanceState::ShuttingDown,
                }),
            ),
            (
                event(
                    "aws.ec2",
                    "EC2 Instance State-change Notification",
                    serde_json::json!({"instance-id": "i-0abc", "state": "terminated"}),
                ),
                Ok(Notice::StateChange {
                    instance_id: id(),
                    state: InstanceState::Terminated,
                }),
            ),
            (
                event(
                    "aws.ec2",
                    "EC2 Instance State-change Notification",
                    serde_json::json!({"instance-id": "i-0abc", "state": "running"}),
                ),
                Ok(Notice::Ignored),
            ),
            (
                event(
                    "aws.health",
                    "AWS Health Event",
                    serde_json::json!({
                    "service": "EC2", "eventTypeCategory": "scheduledChange",
                    "affectedEntities": [{"entityValue": "i-0abc"}, {"entityValue": "i-0def"}]}),
                ),
                Ok(Notice::ScheduledChange {
                    instance_ids: vec![id(), "i-0def".into()],
                }),
            ),
            (
                event(
                    "aws.health",
                    "AWS Health Event",
                    serde_json::json!({
                    "service": "EC2", "eventTypeCategory": "issue", "affectedEntities": []}),
                ),
                Ok(Notice::Ignored),
            ),
            (
                event(
                    "aws.ec2",
                    "EC2 Spot Instance Interruption Warning",
                    serde_json::json!({}),
                ),
                Err("detail.instance-id is missing"),
            ),
            ("{not json".into(), Err("not an EventBridge event")),
            (
                event("aws.s3", "Object Created", serde_json::json!({})),
                Err("unknown event"),
            ),
        ];
        for (body, want) in cases {
            match (parse(&body), want) {
                (Ok(m), Ok(n)) => {
                    assert_eq!(m.notice, n, "{body}");
                    assert_eq!(m.at, Duration::from_secs(1_796_140_800));
                }
                (Err(e), Err(w)) => assert!(e.contains(w), "{e} / {w}"),
                (got, want) => panic!("{body}: got {got:?}, want {want:?}"),
            }
        }
    }
}
