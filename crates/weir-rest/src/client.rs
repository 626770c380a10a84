//! A small blocking client of the REST API, for the `weir` command line (`weir jobs`,
//! `weir checkpoint`, `weir savepoint`, `weir stop`, `weir cancel`) and for tests.
//!
//! It speaks the same Flink endpoints any Flink tool would, and turns their answers into
//! plain values and errors that say what to do.

use serde_json::{json, Value};
use std::time::{Duration, Instant};
use weir_core::SavepointFormat;

/// The default address of a job's REST API.
pub const DEFAULT_URL: &str = "http://127.0.0.1:8081";

/// Why a call failed.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    #[error("the REST address '{0}' is not an http:// URL (e.g. http://127.0.0.1:8081)")]
    BadUrl(String),
    #[error("cannot reach the REST API at {url}: {reason}. Is a job running with its REST API on (weir demo serves http://127.0.0.1:8081 by default)? Pass --rest URL otherwise")]
    Unreachable { url: String, reason: String },
    #[error("{method} {path} was refused ({status}): {message}")]
    Refused {
        method: &'static str,
        path: String,
        status: u16,
        message: String,
    },
    #[error("unexpected answer to {path}: {reason}")]
    Malformed { path: String, reason: String },
    #[error("no job named or with id '{0}' is served there; `weir jobs` lists them")]
    NoSuchJob(String),
    #[error("{what} failed: {reason}")]
    Failed { what: String, reason: String },
    #[error("{what} did not finish within {seconds} s")]
    Timeout { what: String, seconds: u64 },
}

/// One job as `/jobs/overview` lists it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct JobLine {
    pub id: String,
    pub name: String,
    pub state: String,
    pub start_time_ms: i64,
}

/// A blocking REST client.
pub struct RestClient {
    base: String,
    token: Option<String>,
    agent: ureq::Agent,
}

impl RestClient {
    /// A client of the API at `base` (e.g. `http://127.0.0.1:8081`), sending `token` as a bearer
    /// token if given.
    pub fn new(base: &str, token: Option<String>) -> Result<RestClient, ClientError> {
        let base = base.trim().trim_end_matches('/');
        if !base.starts_with("http://") || base.len() <= "http://".len() {
            return Err(ClientError::BadUrl(base.to_string()));
        }
        let agent: ureq::Agent = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .timeout_global(Some(Duration::from_secs(30)))
            .max_redirects(0)
            .build()
            .into();
        Ok(RestClient {
            base: base.to_string(),
            token,
            agent,
        })
    }

    pub fn base(&self) -> &str {
        &self.base
    }

    /// Sends one request and returns the status and the body text, whatever the status.
    pub fn raw(
        &self,
        method: &'static str,
        path: &str,
        body: Option<&str>,
    ) -> Result<(u16, String), ClientError> {
        let url = format!("{}{}", self.base, path);
        let auth = self.token.as_ref().map(|t| format!("Bearer {t}"));
        let result = match method {
            "GET" => {
                let mut r = self.agent.get(&url);
                if let Some(a) = &auth {
                    r = r.header("Authorization", a);
                }
                r.call()
            }
            _ => {
                let mut r = match method {
                    "PATCH" => self.agent.patch(&url),
                    _ => self.agent.post(&url),
                };
                if let Some(a) = &auth {
                    r = r.header("Authorization", a);
                }
                r.header("Content-Type", "application/json")
                    .send(body.unwrap_or("{}"))
            }
        };
        let mut response = result.map_err(|e| ClientError::Unreachable {
            url: url.clone(),
            reason: e.to_string(),
        })?;
        let status = response.status().as_u16();
        let text = response
            .body_mut()
            .read_to_string()
            .map_err(|e| ClientError::Malformed {
                path: path.to_string(),
                reason: e.to_string(),
            })?;
        Ok((status, text))
    }

    /// Sends a request and parses a successful JSON answer; a 4xx/5xx becomes
    /// [`ClientError::Refused`] with the server's message.
    pub fn call(
        &self,
        method: &'static str,
        path: &str,
        body: Option<&Value>,
    ) -> Result<Value, ClientError> {
        let text = body.map(Value::to_string);
        let (status, answer) = self.raw(method, path, text.as_deref())?;
        let parsed: Result<Value, _> = serde_json::from_str(&answer);
        if status >= 400 {
            let message = parsed
                .ok()
                .and_then(|v| {
                    v["errors"].as_array().map(|errors| {
                        errors
                            .iter()
                            .map(|e| e.as_str().map_or_else(|| e.to_string(), str::to_string))
                            .collect::<Vec<_>>()
                            .join("; ")
                    })
                })
                .unwrap_or(answer);
            return Err(ClientError::Refused {
                method,
                path: path.to_string(),
                status,
                message,
            });
        }
        parsed.map_err(|e| ClientError::Malformed {
            path: path.to_string(),
            reason: e.to_string(),
        })
    }

    pub fn get(&self, path: &str) -> Result<Value, ClientError> {
        self.call("GET", path, None)
    }

    /// The jobs served there.
    pub fn jobs(&self) -> Result<Vec<JobLine>, ClientError> {
        let path = "/jobs/overview";
        let overview = self.get(path)?;
        let jobs = overview["jobs"]
            .as_array()
            .ok_or_else(|| ClientError::Malformed {
                path: path.into(),
                reason: "no 'jobs' list".into(),
            })?;
        Ok(jobs
            .iter()
            .map(|j| JobLine {
                id: j["jid"].as_str().unwrap_or_default().to_string(),
                name: j["name"].as_str().unwrap_or_default().to_string(),
                state: j["state"].as_str().unwrap_or_default().to_string(),
                start_time_ms: j["start-time"].as_i64().unwrap_or(-1),
            })
            .collect())
    }

    /// The id of the job named `job` or with id `job`.
    pub fn resolve_job(&self, job: &str) -> Result<String, ClientError> {
        self.jobs()?
            .into_iter()
            .find(|j| j.id == job.to_ascii_lowercase() || j.name == job)
            .map(|j| j.id)
            .ok_or_else(|| ClientError::NoSuchJob(job.to_string()))
    }

    fn trigger(&self, path: &str, body: Value) -> Result<String, ClientError> {
        let answer = self.call("POST", path, Some(&body))?;
        answer["request-id"]
            .as_str()
            .map(str::to_string)
            .ok_or_else(|| ClientError::Malformed {
                path: path.to_string(),
                reason: "no request-id".into(),
            })
    }

    /// Triggers a checkpoint; returns the trigger id.
    pub fn trigger_checkpoint(&self, job_id: &str) -> Result<String, ClientError> {
        self.trigger(&format!("/jobs/{job_id}/checkpoints"), json!({}))
    }

    /// Triggers a savepoint of `format` into `target` (or the job's default directory).
    pub fn trigger_savepoint(
        &self,
        job_id: &str,
        target: Option<&str>,
        format: SavepointFormat,
    ) -> Result<String, ClientError> {
        let mut body = json!({ "cancel-job": false, "formatType": format.flink_name() });
        if let Some(t) = target {
            body["target-directory"] = json!(t);
        }
        self.trigger(&format!("/jobs/{job_id}/savepoints"), body)
    }

    /// Stops the job with a savepoint of `format` into `target` (or the job's default
    /// directory); with `drain`, event time ends first so that every window and timer fires.
    pub fn stop_with_savepoint(
        &self,
        job_id: &str,
        target: Option<&str>,
        format: SavepointFormat,
        drain: bool,
    ) -> Result<String, ClientError> {
        let mut body = json!({ "drain": drain, "formatType": format.flink_name() });
        if let Some(t) = target {
            body["targetDirectory"] = json!(t);
        }
        self.trigger(&format!("/jobs/{job_id}/stop"), body)
    }

    /// Cancels the job (no final checkpoint).
    pub fn cancel(&self, job_id: &str) -> Result<(), ClientError> {
        self.call(
            "PATCH",
            &format!("/jobs/{job_id}?mode=cancel"),
            Some(&json!({})),
        )
        .map(|_| ())
    }

    /// Polls `path` until the operation completes; returns its `operation` object.
    fn wait(&self, path: &str, what: &str, timeout: Duration) -> Result<Value, ClientError> {
        let deadline = Instant::now() + timeout;
        loop {
            let answer = self.get(path)?;
            if answer["status"]["id"] == "COMPLETED" {
                let operation = answer["operation"].clone();
                let cause = operation
                    .get("failure-cause")
                    .or_else(|| operation.get("failureCause"));
                if let Some(cause) = cause {
                    let reason = cause["stack-trace"]
                        .as_str()
                        .or_else(|| cause["class"].as_str())
                        .unwrap_or("unknown cause")
                        .trim()
                        .to_string();
                    return Err(ClientError::Failed {
                        what: what.to_string(),
                        reason,
                    });
                }
                return Ok(operation);
            }
            if Instant::now() >= deadline {
                return Err(ClientError::Timeout {
                    what: what.to_string(),
                    seconds: timeout.as_secs(),
                });
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Waits for a triggered checkpoint; returns its checkpoint id.
    pub fn wait_checkpoint(
        &self,
        job_id: &str,
        trigger: &str,
        timeout: Duration,
    ) -> Result<u64, ClientError> {
        let path = format!("/jobs/{job_id}/checkpoints/{trigger}");
        let op = self.wait(&path, "the checkpoint", timeout)?;
        op["checkpointId"].as_u64().ok_or(ClientError::Malformed {
            path,
            reason: "no checkpointId".into(),
        })
    }

    /// Waits for a savepoint (or a stop with savepoint); returns where it was written.
    pub fn wait_savepoint(
        &self,
        job_id: &str,
        trigger: &str,
        timeout: Duration,
    ) -> Result<String, ClientError> {
        let path = format!("/jobs/{job_id}/savepoints/{trigger}");
        let op = self.wait(&path, "the savepoint", timeout)?;
        op["location"]
            .as_str()
            .map(str::to_string)
            .ok_or(ClientError::Malformed {
                path,
                reason: "no location".into(),
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_http_urls_are_accepted() {
        assert!(RestClient::new("http://127.0.0.1:8081/", None).is_ok());
        assert_eq!(
            RestClient::new("http://127.0.0.1:8081/", None)
                .unwrap()
                .base(),
            "http://127.0.0.1:8081"
        );
        for bad in ["127.0.0.1:8081", "https://x", "http://", "ftp://x"] {
            assert!(
                matches!(RestClient::new(bad, None), Err(ClientError::BadUrl(_))),
                "{bad}"
            );
        }
    }

    #[test]
    fn an_unreachable_server_says_how_to_point_elsewhere() {
        // Port 9 (discard) is closed on loopback here.
        let client = RestClient::new("http://127.0.0.1:9", None).unwrap();
        let e = client.jobs().unwrap_err();
        assert!(e.to_string().contains("--rest"), "{e}");
    }
}
