//! Which proxy a request goes through, decided per URL from the environment as curl and Python's
//! requests (huggingface_hub's client) decide: `https_proxy` for https, `http_proxy` for http,
//! else `all_proxy` (each lowercase first, then uppercase); none for a host that `no_proxy`
//! names. ureq 2 reads one proxy for every scheme and ignores `NO_PROXY` (ureq 3.0 too), hence
//! this small rule, applied to each hop of a redirect.

use std::net::IpAddr;

/// A proxy, with the variable that named it (said in messages).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Proxy {
    pub url: String,
    pub var: &'static str,
}

impl Proxy {
    /// The proxy as a message may show it: without a user or password.
    pub fn shown(&self) -> String {
        let (scheme, rest) = match self.url.split_once("://") {
            Some((s, r)) => (format!("{s}://"), r),
            None => (String::new(), self.url.as_str()),
        };
        let rest = rest.rsplit_once('@').map_or(rest, |(_, host)| host);
        format!("{scheme}{rest} (from {})", self.var)
    }
}

/// The proxy settings of the environment.
#[derive(Clone, Debug, Default)]
pub struct Proxies {
    https: Option<Proxy>,
    http: Option<Proxy>,
    no_proxy: Vec<String>,
}

impl Proxies {
    pub fn from_env() -> Proxies {
        Proxies::from_lookup(|name| std::env::var(name).ok())
    }

    fn from_lookup(get: impl Fn(&str) -> Option<String>) -> Proxies {
        let first = |names: &[&'static str]| {
            names.iter().find_map(|&var| {
                let url = get(var)?.trim().to_string();
                (!url.is_empty()).then_some(Proxy { url, var })
            })
        };
        let all = ["all_proxy", "ALL_PROXY"];
        let https = first(&["https_proxy", "HTTPS_PROXY"]).or_else(|| first(&all));
        let http = first(&["http_proxy", "HTTP_PROXY"]).or_else(|| first(&all));
        let no_proxy = ["no_proxy", "NO_PROXY"]
            .iter()
            .find_map(|var| get(var).filter(|v| !v.trim().is_empty()))
            .unwrap_or_default()
            .split(',')
            .map(|e| e.trim().to_ascii_lowercase())
            .filter(|e| !e.is_empty())
            .collect();
        Proxies {
            https,
            http,
            no_proxy,
        }
    }

    /// The proxy for `scheme://host:port`, or `None` to connect directly.
    pub fn for_url(&self, scheme: &str, host: &str, port: u16) -> Option<&Proxy> {
        let proxy = match scheme {
            "https" => self.https.as_ref(),
            _ => self.http.as_ref(),
        }?;
        (!bypassed(&self.no_proxy, host, port)).then_some(proxy)
    }
}

/// Whether `no_proxy`'s entries name `host` (and `port`): `*` names every host; `.example.com`
/// and `example.com` name it and its subdomains; `host:port` only that port; an address or a
/// network (`10.0.0.0/8`) names the addresses in it.
fn bypassed(no_proxy: &[String], host: &str, port: u16) -> bool {
    let host = host
        .trim_start_matches('[')
        .trim_end_matches(']')
        .trim_end_matches('.')
        .to_ascii_lowercase();
    let address: Option<IpAddr> = host.parse().ok();
    no_proxy.iter().any(|entry| {
        if entry == "*" {
            return true;
        }
        let (name, entry_port) = split_port(entry);
        if entry_port.is_some_and(|p| p != port) {
            return false;
        }
        if let Some((net, bits)) = name.split_once('/') {
            return match (address, net.parse::<IpAddr>(), bits.parse::<u32>()) {
                (Some(a), Ok(n), Ok(bits)) => in_network(a, n, bits),
                _ => false,
            };
        }
        let name = name
            .trim_start_matches("*.")
            .trim_start_matches('.')
            .trim_end_matches('.');
        if name.is_empty() {
            return false;
        }
        match (address, name.parse::<IpAddr>()) {
            (Some(a), Ok(n)) => a == n,
            (None, Err(_)) => host == name || host.ends_with(&format!(".{name}")),
            _ => false,
        }
    })
}

/// An entry's host and port: `host:port`, `[v6]:port`, a bare IPv6 address (no port).
fn split_port(entry: &str) -> (&str, Option<u16>) {
    if let Some(rest) = entry.strip_prefix('[') {
        let (host, after) = rest.split_once(']').unwrap_or((rest, ""));
        return (host, after.strip_prefix(':').and_then(|p| p.parse().ok()));
    }
    match entry.split_once(':') {
        Some((host, port)) if !port.contains(':') && !host.contains('/') => {
            (host, port.parse().ok())
        }
        _ => (entry, None),
    }
}

fn in_network(address: IpAddr, network: IpAddr, bits: u32) -> bool {
    let (a, n, width) = match (address, network) {
        (IpAddr::V4(a), IpAddr::V4(n)) => (u32::from(a) as u128, u32::from(n) as u128, 32),
        (IpAddr::V6(a), IpAddr::V6(n)) => (u128::from(a), u128::from(n), 128),
        _ => return false,
    };
    if bits > width {
        return false;
    }
    let shift = width - bits;
    bits == 0 || (a >> shift) == (n >> shift)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn proxies(vars: &[(&str, &str)]) -> Proxies {
        Proxies::from_lookup(|name| {
            vars.iter()
                .find(|(k, _)| *k == name)
                .map(|(_, v)| v.to_string())
        })
    }

    #[test]
    fn each_scheme_has_its_variable_lowercase_first() {
        let p = proxies(&[
            ("HTTPS_PROXY", "http://upper:1"),
            ("https_proxy", "http://lower:1"),
            ("ALL_PROXY", "socks5://all:1"),
        ]);
        assert_eq!(p.for_url("https", "h", 443).unwrap().var, "https_proxy");
        assert_eq!(p.for_url("http", "h", 80).unwrap().var, "ALL_PROXY");
        let only_https = proxies(&[("HTTPS_PROXY", "http://p:3128")]);
        assert_eq!(only_https.for_url("http", "h", 80), None);
        assert_eq!(proxies(&[]).for_url("https", "h", 443), None);
    }

    #[test]
    fn no_proxy_names_hosts_as_curl_does() {
        let p = |no: &str| proxies(&[("HTTPS_PROXY", "http://p:1"), ("NO_PROXY", no)]);
        let direct = |no: &str, host: &str, port: u16| p(no).for_url("https", host, port).is_none();
        assert!(direct("*", "huggingface.co", 443));
        assert!(direct("example.com, huggingface.co", "huggingface.co", 443));
        assert!(direct(".huggingface.co", "cdn-lfs.huggingface.co", 443));
        assert!(direct(".huggingface.co", "huggingface.co", 443));
        assert!(direct("huggingface.co", "cdn-lfs.HuggingFace.co", 443));
        assert!(!direct("huggingface.co", "nothuggingface.co", 443));
        assert!(direct("127.0.0.1", "127.0.0.1", 8080));
        assert!(direct("127.0.0.1:8080", "127.0.0.1", 8080));
        assert!(!direct("127.0.0.1:8081", "127.0.0.1", 8080));
        assert!(direct("10.0.0.0/8", "10.2.3.4", 443));
        assert!(!direct("10.0.0.0/8", "11.2.3.4", 443));
        assert!(direct("::1", "[::1]", 443));
        assert!(direct("[::1]:443", "[::1]", 443));
        assert!(!direct("", "huggingface.co", 443));
        let lower_wins = proxies(&[
            ("HTTPS_PROXY", "http://p:1"),
            ("no_proxy", "a.b"),
            ("NO_PROXY", "*"),
        ]);
        assert!(lower_wins.for_url("https", "c.d", 443).is_some());
    }

    #[test]
    fn a_shown_proxy_keeps_no_password() {
        let p = Proxy {
            url: "http://user:secret@proxy:3128".into(),
            var: "HTTPS_PROXY",
        };
        assert_eq!(p.shown(), "http://proxy:3128 (from HTTPS_PROXY)");
    }
}
