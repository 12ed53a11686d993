//! Findings: a decision about one job that its page shows, by the
//! convention the WIT file writes down beside `decision`.
//!
//! ```ignore
//! let d = Finding::new("resnet", "straggler", "rank 2 holds resnet back: ...")
//!     .about("rank", 2)
//!     .during(first_ns, last_ns)
//!     .headline()
//!     .evidence(serde_json::json!({"late_by_ms": 250}))
//!     .decision();
//! host.emit_decision(&d);
//! ```
//!
//! The host keeps the latest finding per (plugin, kind, subject) across
//! restarts, shows each job only its own, and puts the headline ones first:
//! the sentence that answers "why is this job slow". It reads no plugin's
//! name to do so, only these attributes.

use crate::types::{Attribute, Decision, Value};

/// A finding being built; [`Finding::decision`] turns it into the decision to emit.
#[derive(Debug, Clone)]
pub struct Finding {
    job: String,
    kind: String,
    sentence: String,
    about: (String, String),
    subject: Option<String>,
    range: Option<(u64, u64)>,
    ended: bool,
    headline: bool,
    evidence: String,
    extra: Vec<Attribute>,
}

impl Finding {
    /// A finding of `kind` about `job` as a whole, said in one sentence.
    pub fn new(job: impl Into<String>, kind: impl Into<String>, sentence: impl Into<String>) -> Finding {
        Finding {
            job: job.into(),
            kind: kind.into(),
            sentence: sentence.into(),
            about: ("job".into(), String::new()),
            subject: None,
            range: None,
            ended: false,
            headline: false,
            evidence: "{}".into(),
            extra: Vec::new(),
        }
    }

    /// What in the job it is about: `("rank", 3)`, `("node", "gpu-7")`,
    /// `("stage", 3)`, `("link", "gpu-7")`, `("op", "pp_send")`.
    pub fn about(mut self, what: &str, id: impl ToString) -> Finding {
        self.about = (what.to_string(), id.to_string());
        self
    }

    /// The decision's subject (the key the host keeps the latest of); by
    /// default `<job>` for the job, `<job>/<what>-<id>` for a part of it.
    pub fn subject(mut self, subject: impl Into<String>) -> Finding {
        self.subject = Some(subject.into());
        self
    }

    /// The time it covers, ns since the epoch.
    pub fn during(mut self, start_ns: u64, end_ns: u64) -> Finding {
        self.range = Some((start_ns, end_ns));
        self
    }

    /// It answers why the job is slow (or failing): its page opens with it.
    pub fn headline(mut self) -> Finding {
        self.headline = true;
        self
    }

    /// What it described is over (the job ended, the rank caught up).
    pub fn ended(mut self) -> Finding {
        self.ended = true;
        self
    }

    /// The evidence, as JSON: shown as a table beside the sentence.
    pub fn evidence(mut self, evidence: serde_json::Value) -> Finding {
        self.evidence = evidence.to_string();
        self
    }

    /// One more attribute, exported with the decision.
    pub fn attribute(mut self, key: impl Into<String>, value: impl Into<Value>) -> Finding {
        self.extra.push(Attribute::new(key, value));
        self
    }

    pub fn decision(self) -> Decision {
        let (what, id) = self.about;
        let subject = self.subject.unwrap_or_else(|| {
            if what == "job" {
                self.job.clone()
            } else {
                format!("{}/{what}-{id}", self.job)
            }
        });
        let mut attributes = vec![
            Attribute::new("sonde.job", self.job),
            Attribute::new("sonde.finding.about", what),
            Attribute::new("sonde.finding.id", id),
        ];
        if let Some((start, end)) = self.range {
            attributes.push(Attribute::new(
                "sonde.finding.start_ns",
                start.min(i64::MAX as u64) as i64,
            ));
            attributes.push(Attribute::new("sonde.finding.end_ns", end.min(i64::MAX as u64) as i64));
        }
        if self.ended {
            attributes.push(Attribute::new("sonde.finding.ended", true));
        }
        if self.headline {
            attributes.push(Attribute::new("sonde.finding.headline", true));
        }
        attributes.extend(self.extra);
        Decision {
            kind: self.kind,
            subject,
            reason: self.sentence,
            body: self.evidence,
            attributes,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_finding_is_a_decision_with_the_job_and_its_place() {
        let d = Finding::new("ddp", "straggler", "rank 2 holds ddp back")
            .about("rank", 2)
            .during(10, 20)
            .headline()
            .evidence(serde_json::json!({"late_by_ms": 250}))
            .decision();
        assert_eq!((d.kind.as_str(), d.subject.as_str()), ("straggler", "ddp/rank-2"));
        assert_eq!(d.body, r#"{"late_by_ms":250}"#);
        let get = |k: &str| d.attributes.iter().find(|a| a.key == k).map(|a| a.value.clone());
        assert_eq!(get("sonde.job"), Some(Value::Str("ddp".into())));
        assert_eq!(get("sonde.finding.id"), Some(Value::Str("2".into())));
        assert_eq!(get("sonde.finding.end_ns"), Some(Value::Int(20)));
        assert_eq!(get("sonde.finding.headline"), Some(Value::Boolean(true)));
        assert_eq!(get("sonde.finding.ended"), None);
        let whole = Finding::new("ddp", "diagnosis", "healthy").ended().decision();
        assert_eq!(whole.subject, "ddp");
        assert!(whole.attributes.iter().any(|a| a.key == "sonde.finding.ended"));
    }
}
