//! The Hub's HTTP, bounded: every request has ureq's timeouts (connect, and the whole answer with
//! its body), goes through the proxy the environment names for its host ([`super::proxy`]), and
//! follows redirects here rather than in ureq, so that each hop is checked (http or https only,
//! never from https down to http, at most five) and gets its own proxy, and the token goes only to
//! the Hub's own origin (scheme, host and port of `HF_ENDPOINT`), never to the storage a file is
//! redirected to.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use url::Url;

use super::proxy::{Proxies, Proxy};

/// Redirects followed at most (the Hub sends one, to its storage; a renamed repository one more).
const REDIRECTS: usize = 5;

/// A client of one Hub.
pub struct Client {
    endpoint: Url,
    token: Option<String>,
    timeout: Duration,
    proxies: Proxies,
    /// One agent per proxy (`None`: direct), each keeping its connections.
    agents: Mutex<HashMap<Option<String>, ureq::Agent>>,
}

/// A successful answer, after the redirects.
pub struct Reply {
    pub response: ureq::Response,
    /// `X-Repo-Commit` of the Hub's own answers (storage's headers are not the Hub's word).
    pub commit: Option<String>,
    /// `X-Linked-Etag`, else `ETag`, of the Hub's own answers, as sent.
    pub etag: Option<String>,
}

/// Why a request failed.
pub enum Failure {
    /// An answer of 400 or more; its headers and body hold the Hub's reason.
    Status(u16, Box<ureq::Response>),
    /// No answer (refused, timed out, dropped): worth another try.
    Transport(String),
    /// An answer refused here (a redirect off http(s), down to http, or too many).
    Refused(String),
    /// The environment names a proxy this client cannot use.
    Proxy(String),
}

impl Client {
    /// A client of the Hub at `endpoint` (`HF_ENDPOINT`), with the environment's proxies.
    pub fn new(endpoint: &str, token: Option<String>, timeout: Duration) -> Result<Client, String> {
        let url = Url::parse(endpoint).map_err(|e| e.to_string())?;
        if !matches!(url.scheme(), "http" | "https") || url.host_str().is_none() {
            return Err("not an http or https URL with a host".into());
        }
        Ok(Client {
            endpoint: url,
            token,
            timeout,
            proxies: Proxies::from_env(),
            agents: Mutex::new(HashMap::new()),
        })
    }

    fn agent(&self, proxy: Option<&Proxy>) -> Result<ureq::Agent, Failure> {
        let mut agents = self.agents.lock().expect("no thread panics holding it");
        let key = proxy.map(|p| p.url.clone());
        if let Some(agent) = agents.get(&key) {
            return Ok(agent.clone());
        }
        let mut builder = ureq::AgentBuilder::new()
            .timeout_connect(self.timeout)
            .timeout(self.timeout)
            .redirects(0)
            .user_agent(concat!("iteragpu/", env!("CARGO_PKG_VERSION")));
        if let Some(p) = proxy {
            let parsed = ureq::Proxy::new(&p.url).map_err(|e| {
                Failure::Proxy(format!(
                    "the proxy {} is not one this tool can use (http:// and socks5:// are; https:// is not): {e}; fix the variable, or name the host in NO_PROXY",
                    p.shown()
                ))
            })?;
            builder = builder.proxy(parsed);
        }
        let agent = builder.build();
        agents.insert(key, agent.clone());
        Ok(agent)
    }

    /// GET `url` (with `Range: bytes=START-…` for `range` = (start, count)), redirects followed.
    pub fn get(&self, url: &str, range: Option<(u64, u64)>) -> Result<Reply, Failure> {
        let mut url = Url::parse(url).map_err(|e| Failure::Refused(format!("{url}: {e}")))?;
        let (mut commit, mut etag) = (None, None);
        for _ in 0..=REDIRECTS {
            let hub = url.origin() == self.endpoint.origin();
            let host = url.host_str().unwrap_or_default();
            let port = url.port_or_known_default().unwrap_or(0);
            let proxy = self.proxies.for_url(url.scheme(), host, port);
            let mut request = self.agent(proxy)?.request_url("GET", &url);
            if let Some((start, count)) = range {
                let last = start + count.max(1) - 1;
                request = request.set("Range", &format!("bytes={start}-{last}"));
            }
            if let (true, Some(token)) = (hub, &self.token) {
                request = request.set("Authorization", &format!("Bearer {token}"));
            }
            let response = match request.call() {
                Ok(r) => r,
                Err(ureq::Error::Status(status, r)) if hub => {
                    return Err(Failure::Status(status, Box::new(r)));
                }
                // Storage the Hub redirected to: its refusal is no word of the Hub's.
                Err(ureq::Error::Status(status, _)) if status == 429 || status >= 500 => {
                    return Err(Failure::Transport(format!("{url} answered {status}")));
                }
                Err(ureq::Error::Status(status, _)) => {
                    return Err(Failure::Refused(format!(
                        "{url}, where the Hub redirected, answered {status} (the token goes only to the Hub at {})",
                        self.endpoint.origin().ascii_serialization()
                    )));
                }
                Err(ureq::Error::Transport(t)) => {
                    return Err(Failure::Transport(match proxy {
                        Some(p) => format!("{t}, through the proxy {}", p.shown()),
                        None => t.to_string(),
                    }));
                }
            };
            if hub {
                let header = |name| response.header(name).map(str::to_string);
                commit = commit.or_else(|| header("x-repo-commit"));
                etag = etag.or_else(|| header("x-linked-etag").or_else(|| header("etag")));
            }
            let status = response.status();
            if !(300..400).contains(&status) {
                return Ok(Reply {
                    response,
                    commit,
                    etag,
                });
            }
            let shown = |text: &str| crate::output::terminal_safe(text).into_owned();
            let location = response.header("location").ok_or_else(|| {
                Failure::Refused(format!("{url} answered {status} with no Location"))
            })?;
            let next = url.join(location).map_err(|e| {
                Failure::Refused(format!("{url} redirects to `{}`: {e}", shown(location)))
            })?;
            let downgrade = url.scheme() == "https" && next.scheme() == "http";
            if !matches!(next.scheme(), "http" | "https") || next.host_str().is_none() || downgrade
            {
                return Err(Failure::Refused(format!(
                    "{url} redirects to `{}`, which is not followed (only http and https, never from https down to http)",
                    shown(next.as_str())
                )));
            }
            url = next;
        }
        Err(Failure::Refused(format!(
            "more than {REDIRECTS} redirects, the last to {url}"
        )))
    }
}
