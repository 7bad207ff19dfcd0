//! A Hugging Face Hub on 127.0.0.1 for the tests and the bench: the API route
//! (`/api/models/ORG/NAME/revision/REV`: commit and files) and the file route
//! (`/ORG/NAME/resolve/REV/FILE`, with the ETag and X-Repo-Commit headers the Hub sends, range
//! requests, and shards redirected to a CDN route as the Hub redirects LFS files), serving a few
//! repositories built from the committed configs (`tests/fixtures/models/`), with the ways a real
//! Hub fails: gated (401/403 with `X-Error-Code: GatedRepo`), private, a missing repository,
//! revision or file, a slow answer and dropped connections; and the ways a hostile one could try
//! to write outside the cache or get the token elsewhere (an ETag or a commit that is a path, a
//! redirect to another host). It counts what it sends and notes who got the token.

#![allow(dead_code)]

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use sha2::Digest;

/// A file of a repository: bytes, or a shard whose first bytes are its header and whose
/// remaining bytes (never materialized) are zeros.
#[derive(Clone)]
pub enum File {
    Bytes(Vec<u8>),
    Shard { head: Vec<u8>, len: u64 },
}

impl File {
    fn len(&self) -> u64 {
        match self {
            File::Bytes(b) => b.len() as u64,
            File::Shard { len, .. } => *len,
        }
    }

    fn slice(&self, start: u64, end: u64) -> Vec<u8> {
        let head = match self {
            File::Bytes(b) => b.as_slice(),
            File::Shard { head, .. } => head.as_slice(),
        };
        (start..end)
            .map(|i| head.get(i as usize).copied().unwrap_or(0))
            .collect()
    }

    fn etag(&self) -> String {
        let mut h = sha2::Sha256::new();
        match self {
            File::Bytes(b) => h.update(b),
            File::Shard { head, len } => {
                h.update(head);
                h.update(len.to_le_bytes());
            }
        }
        h.finalize()
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect::<String>()
    }
}

/// How a repository answers.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Behaviour {
    Normal,
    /// Files refused with GatedRepo (401 without a token, 403 with one).
    Gated,
    /// Everything refused as RepoNotFound (401) unless the token is [`TOKEN`].
    Private,
    /// Each file answer waits this long first.
    Slow(Duration),
    /// The first N connections to a file route are closed without an answer.
    DropFirst(u32),
    /// Every connection to a file route is closed without an answer.
    DropAlways,
    /// Its small files are answered with this ETag (quotes included).
    HostileEtag(&'static str),
    /// Its small files are answered with this X-Repo-Commit.
    HostileCommit(&'static str),
    /// Its small files are redirected to `localhost` (another host than 127.0.0.1), which wants
    /// the token (401 without it).
    RedirectAway,
}

/// A request as the server saw it.
#[derive(Clone, Debug)]
pub struct Seen {
    /// The Host header (`127.0.0.1:PORT`, `localhost:PORT`).
    pub host: String,
    pub path: String,
    /// Whether it carried an Authorization header.
    pub token: bool,
}

pub const TOKEN: &str = "hf_test_token";

pub struct Repo {
    pub commit: String,
    pub files: BTreeMap<String, File>,
    pub behaviour: Behaviour,
}

struct State {
    repos: BTreeMap<String, Repo>,
    endpoint: String,
    bytes_sent: AtomicU64,
    requests: Mutex<Vec<String>>,
    seen: Mutex<Vec<Seen>>,
    dropped: AtomicU32,
    stop: AtomicBool,
}

/// The running server; it stops when dropped.
pub struct Hub {
    pub endpoint: String,
    state: Arc<State>,
}

impl Hub {
    pub fn start(repos: BTreeMap<String, Repo>) -> Hub {
        let listener = TcpListener::bind("127.0.0.1:0").expect("a loopback port");
        let endpoint = format!("http://{}", listener.local_addr().unwrap());
        let state = Arc::new(State {
            repos,
            endpoint: endpoint.clone(),
            bytes_sent: AtomicU64::new(0),
            requests: Mutex::new(Vec::new()),
            seen: Mutex::new(Vec::new()),
            dropped: AtomicU32::new(0),
            stop: AtomicBool::new(false),
        });
        let shared = Arc::clone(&state);
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                if shared.stop.load(Ordering::Relaxed) {
                    break;
                }
                let Ok(stream) = stream else { continue };
                let state = Arc::clone(&shared);
                std::thread::spawn(move || {
                    let _ = serve(&state, stream);
                });
            }
        });
        Hub { endpoint, state }
    }

    /// Bytes sent so far (status lines, headers and bodies).
    pub fn bytes_sent(&self) -> u64 {
        self.state.bytes_sent.load(Ordering::Relaxed)
    }

    /// `METHOD PATH [Range]` of every request so far.
    pub fn requests(&self) -> Vec<String> {
        self.state.requests.lock().unwrap().clone()
    }

    /// Every request so far, with its host and whether it carried a token.
    pub fn seen(&self) -> Vec<Seen> {
        self.state.seen.lock().unwrap().clone()
    }

    /// The port it listens on (of 127.0.0.1; `localhost` reaches it too).
    pub fn port(&self) -> u16 {
        self.endpoint.rsplit(':').next().unwrap().parse().unwrap()
    }

    pub fn reset_counts(&self) {
        self.state.bytes_sent.store(0, Ordering::Relaxed);
        self.state.requests.lock().unwrap().clear();
    }
}

impl Drop for Hub {
    fn drop(&mut self) {
        self.state.stop.store(true, Ordering::Relaxed);
        // Wakes the accept loop so that it sees the stop.
        let _ = TcpStream::connect(self.endpoint.trim_start_matches("http://"));
    }
}

struct Request {
    /// `GET`, or `HEAD` (huggingface_hub's own client asks a file's metadata so): answered with
    /// the same status and headers, no body.
    method: String,
    path: String,
    headers: BTreeMap<String, String>,
}

fn read_request(stream: &TcpStream) -> Option<Request> {
    let mut reader = BufReader::new(stream.try_clone().ok()?);
    let mut line = String::new();
    reader.read_line(&mut line).ok()?;
    let mut parts = line.split_whitespace();
    let (method, path) = (parts.next()?.to_string(), parts.next()?.to_string());
    let mut headers = BTreeMap::new();
    loop {
        let mut h = String::new();
        if reader.read_line(&mut h).ok()? == 0 || h.trim().is_empty() {
            break;
        }
        if let Some((k, v)) = h.split_once(':') {
            headers.insert(k.trim().to_ascii_lowercase(), v.trim().to_string());
        }
    }
    Some(Request {
        method,
        path,
        headers,
    })
}

struct Answer {
    status: u16,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
}

impl Answer {
    fn error(status: u16, code: &str, message: &str) -> Answer {
        Answer {
            status,
            headers: vec![
                ("X-Error-Code".into(), code.into()),
                ("X-Error-Message".into(), message.into()),
                ("Content-Type".into(), "application/json".into()),
            ],
            body: serde_json::json!({"error": message})
                .to_string()
                .into_bytes(),
        }
    }
}

fn serve(state: &State, mut stream: TcpStream) -> std::io::Result<()> {
    let Some(request) = read_request(&stream) else {
        return Ok(());
    };
    let range = request.headers.get("range").cloned().unwrap_or_default();
    state
        .requests
        .lock()
        .unwrap()
        .push(format!("{} {} {range}", request.method, request.path));
    state.seen.lock().unwrap().push(Seen {
        host: request.headers.get("host").cloned().unwrap_or_default(),
        path: request.path.clone(),
        token: request.headers.contains_key("authorization"),
    });
    let answer = match route(state, &request) {
        Some(a) => a,
        // Dropped: the connection closes without a byte.
        None => return Ok(()),
    };
    let reason = match answer.status {
        200 => "OK",
        206 => "Partial Content",
        302 => "Found",
        401 => "Unauthorized",
        403 => "Forbidden",
        404 => "Not Found",
        416 => "Range Not Satisfiable",
        _ => "Error",
    };
    let mut out = format!("HTTP/1.1 {} {reason}\r\n", answer.status);
    for (k, v) in &answer.headers {
        out.push_str(&format!("{k}: {v}\r\n"));
    }
    out.push_str(&format!(
        "Content-Length: {}\r\nConnection: close\r\n\r\n",
        answer.body.len()
    ));
    let mut bytes = out.into_bytes();
    if request.method != "HEAD" {
        bytes.extend_from_slice(&answer.body);
    }
    state
        .bytes_sent
        .fetch_add(bytes.len() as u64, Ordering::Relaxed);
    stream.write_all(&bytes)?;
    stream.flush()
}

fn authorized(request: &Request) -> bool {
    request.headers.get("authorization").map(String::as_str) == Some(&format!("Bearer {TOKEN}"))
}

fn route(state: &State, request: &Request) -> Option<Answer> {
    let path = request.path.split('?').next().unwrap_or("");
    if let Some(rest) = path.strip_prefix("/api/models/") {
        // huggingface_hub's `repo_info` without a revision asks `/api/models/ORG/NAME`.
        let (repo_id, rev) = rest.split_once("/revision/").unwrap_or((rest, "main"));
        return Some(api(state, request, repo_id, &rev.replace("%2F", "/")));
    }
    if let Some(rest) = path.strip_prefix("/api/datasets/") {
        // A data set's description (its files and their sizes), kept under `datasets/ORG/NAME`.
        let (repo_id, rev) = rest.split_once("/revision/").unwrap_or((rest, "main"));
        let key = format!("datasets/{repo_id}");
        return Some(api(state, request, &key, &rev.replace("%2F", "/")));
    }
    if let Some(rest) = path.strip_prefix("/cdn/") {
        // /cdn/ORG/NAME/COMMIT/FILE: what the Hub's storage serves after the redirect.
        let mut parts = rest.splitn(4, '/');
        let (org, name, _commit, file) =
            (parts.next()?, parts.next()?, parts.next()?, parts.next()?);
        let repo = state.repos.get(&format!("{org}/{name}"))?;
        if repo.behaviour == Behaviour::RedirectAway && !authorized(request) {
            return Some(Answer::error(
                401,
                "",
                "Invalid credentials in Authorization header",
            ));
        }
        let f = repo.files.get(file)?;
        // On the same host as the Hub here, huggingface_hub's own client follows the redirect
        // and reads the file's metadata from this answer: it carries the commit too.
        let commit = vec![("X-Repo-Commit".to_string(), repo.commit.clone())];
        return Some(content(request, f, commit));
    }
    let mut parts = path.trim_start_matches('/').splitn(5, '/');
    let (org, name, resolve, rev, file) = (
        parts.next()?,
        parts.next()?,
        parts.next()?,
        parts.next()?,
        parts.next()?,
    );
    if resolve != "resolve" {
        return Some(Answer::error(404, "", "Not Found"));
    }
    let repo_id = format!("{org}/{name}");
    let Some(repo) = state.repos.get(&repo_id) else {
        return Some(repo_not_found(&repo_id));
    };
    match repo.behaviour {
        Behaviour::Slow(wait) => std::thread::sleep(wait),
        Behaviour::DropAlways => return None,
        Behaviour::DropFirst(n) if state.dropped.fetch_add(1, Ordering::Relaxed) < n => {
            return None;
        }
        Behaviour::Gated => {
            let (status, why) = if authorized(request) {
                (
                    403,
                    format!(
                        "Access to model {repo_id} is restricted and you are not in the authorized list. Visit {}/{repo_id} to ask for access.",
                        state.endpoint
                    ),
                )
            } else {
                (
                    401,
                    format!(
                        "Access to model {repo_id} is restricted. You must have access to it and be authenticated to access it. Please log in."
                    ),
                )
            };
            return Some(Answer::error(status, "GatedRepo", &why));
        }
        Behaviour::Private if !authorized(request) => return Some(repo_not_found(&repo_id)),
        _ => {}
    }
    let rev = rev.replace("%2F", "/");
    if rev != "main" && rev != repo.commit {
        return Some(Answer::error(
            404,
            "RevisionNotFound",
            &format!("Invalid rev id: {rev}"),
        ));
    }
    let Some(f) = repo.files.get(file) else {
        return Some(Answer::error(
            404,
            "EntryNotFound",
            &format!("{file} does not exist on \"{rev}\""),
        ));
    };
    let mut headers = vec![("X-Repo-Commit".to_string(), repo.commit.clone())];
    if file.ends_with(".safetensors") {
        // LFS files: the Hub answers with a redirect to its storage, the linked ETag and size.
        headers.push(("X-Linked-Etag".into(), format!("\"{}\"", f.etag())));
        headers.push(("X-Linked-Size".into(), f.len().to_string()));
        headers.push((
            "Location".into(),
            format!("{}/cdn/{repo_id}/{}/{file}", state.endpoint, repo.commit),
        ));
        return Some(Answer {
            status: 302,
            headers,
            body: Vec::new(),
        });
    }
    match repo.behaviour {
        Behaviour::HostileCommit(commit) => headers[0].1 = commit.to_string(),
        Behaviour::HostileEtag(etag) => headers.push(("ETag".into(), etag.into())),
        Behaviour::RedirectAway => {
            let port = state.endpoint.rsplit(':').next().unwrap_or_default();
            headers.push(("ETag".into(), format!("\"{}\"", f.etag())));
            headers.push((
                "Location".into(),
                format!(
                    "http://localhost:{port}/cdn/{repo_id}/{}/{file}",
                    repo.commit
                ),
            ));
            return Some(Answer {
                status: 302,
                headers,
                body: Vec::new(),
            });
        }
        _ => {}
    }
    Some(content(request, f, headers))
}

fn repo_not_found(repo_id: &str) -> Answer {
    Answer::error(
        401,
        "RepoNotFound",
        &format!(
            "Repository Not Found for url: /api/models/{repo_id}. Please make sure you specified the correct `repo_id` and `repo_type`. If you are trying to access a private or gated repo, make sure you are authenticated."
        ),
    )
}

fn api(state: &State, request: &Request, repo_id: &str, rev: &str) -> Answer {
    let Some(repo) = state.repos.get(repo_id) else {
        return repo_not_found(repo_id);
    };
    if repo.behaviour == Behaviour::Private && !authorized(request) {
        return repo_not_found(repo_id);
    }
    if rev != "main" && rev != repo.commit {
        return Answer::error(404, "RevisionNotFound", &format!("Invalid rev id: {rev}"));
    }
    let siblings: Vec<_> = repo
        .files
        .iter()
        .map(|(f, file)| serde_json::json!({"rfilename": f, "size": file.len()}))
        .collect();
    let id = repo_id.strip_prefix("datasets/").unwrap_or(repo_id);
    let body =
        serde_json::json!({"id": id, "modelId": id, "sha": repo.commit, "siblings": siblings});
    Answer {
        status: 200,
        headers: vec![("Content-Type".into(), "application/json".into())],
        body: body.to_string().into_bytes(),
    }
}

/// The file's bytes, or the range asked for (`bytes=A-B`, `bytes=A-`) with its Content-Range.
fn content(request: &Request, f: &File, mut headers: Vec<(String, String)>) -> Answer {
    if !headers.iter().any(|(k, _)| k == "ETag") {
        headers.push(("ETag".into(), format!("\"{}\"", f.etag())));
    }
    headers.push(("Accept-Ranges".into(), "bytes".into()));
    let len = f.len();
    let Some(spec) = request
        .headers
        .get("range")
        .and_then(|r| r.strip_prefix("bytes="))
    else {
        return Answer {
            status: 200,
            headers,
            body: f.slice(0, len),
        };
    };
    let (a, b) = spec.split_once('-').unwrap_or((spec, ""));
    let start: u64 = a.parse().unwrap_or(0);
    let end = b.parse::<u64>().map_or(len, |b| (b + 1).min(len));
    if start >= len && len > 0 {
        headers.push(("Content-Range".into(), format!("bytes */{len}")));
        return Answer {
            status: 416,
            headers,
            body: Vec::new(),
        };
    }
    headers.push((
        "Content-Range".into(),
        format!("bytes {start}-{}/{len}", end.saturating_sub(1)),
    ));
    Answer {
        status: 206,
        headers,
        body: f.slice(start, end),
    }
}

/// A fixed commit per repository, as the Hub names them.
pub fn commit_of(repo: &str) -> String {
    let digest = sha2::Sha256::digest(repo.as_bytes());
    digest.iter().take(20).map(|b| format!("{b:02x}")).collect()
}

fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/models")
        .join(name)
}

fn read(path: &Path) -> File {
    File::Bytes(std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display())))
}

/// A safetensors shard of `tensors` (name, dtype, shape): its header and its length.
pub fn shard(tensors: &[(String, &str, Vec<u64>)]) -> File {
    let borrowed: Vec<(&str, &str, Vec<u64>)> = tensors
        .iter()
        .map(|(n, d, s)| (n.as_str(), *d, s.clone()))
        .collect();
    let (head, data) = iteragpu::model::safetensors::header_bytes(&borrowed);
    let len = head.len() as u64 + data;
    File::Shard { head, len }
}

/// Llama-3.1-8B's tensors in bfloat16, from its config: 8,030,261,248 parameters.
pub fn llama_tensors() -> Vec<(String, &'static str, Vec<u64>)> {
    llama_tensors_of(128_256, 4096, 14_336, 1024, 32)
}

/// A Llama's tensors in bfloat16 (untied head): vocabulary, hidden size, MLP size, the keys' and
/// values' width, layers.
pub fn llama_tensors_of(
    vocab: u64,
    hidden: u64,
    inter: u64,
    kv: u64,
    layers: u64,
) -> Vec<(String, &'static str, Vec<u64>)> {
    let mut t = vec![(
        "model.embed_tokens.weight".to_string(),
        "BF16",
        vec![vocab, hidden],
    )];
    for l in 0..layers {
        let p = format!("model.layers.{l}");
        for (n, shape) in [
            ("self_attn.q_proj.weight", vec![hidden, hidden]),
            ("self_attn.k_proj.weight", vec![kv, hidden]),
            ("self_attn.v_proj.weight", vec![kv, hidden]),
            ("self_attn.o_proj.weight", vec![hidden, hidden]),
            ("mlp.gate_proj.weight", vec![inter, hidden]),
            ("mlp.up_proj.weight", vec![inter, hidden]),
            ("mlp.down_proj.weight", vec![hidden, inter]),
            ("input_layernorm.weight", vec![hidden]),
            ("post_attention_layernorm.weight", vec![hidden]),
        ] {
            t.push((format!("{p}.{n}"), "BF16", shape));
        }
    }
    t.push(("model.norm.weight".into(), "BF16", vec![hidden]));
    t.push(("lm_head.weight".into(), "BF16", vec![vocab, hidden]));
    t
}

/// `repo` as Llama-3.1-8B in `shards` shards with their index (configs from the fixture).
pub fn llama_repo(repo: &str, shards: usize, behaviour: Behaviour) -> Repo {
    let tensors = llama_tensors();
    let per = tensors.len().div_ceil(shards);
    let mut files = BTreeMap::new();
    let mut weight_map = serde_json::Map::new();
    let mut total = 0u64;
    for (i, chunk) in tensors.chunks(per).enumerate() {
        let name = format!("model-{:05}-of-{shards:05}.safetensors", i + 1);
        for (t, _, shape) in chunk {
            weight_map.insert(t.clone(), serde_json::json!(name));
            total += shape.iter().product::<u64>() * 2;
        }
        files.insert(name, shard(chunk));
    }
    let index = serde_json::json!({"metadata": {"total_size": total}, "weight_map": weight_map});
    files.insert(
        "model.safetensors.index.json".into(),
        File::Bytes(serde_json::to_vec_pretty(&index).unwrap()),
    );
    files.insert(
        "config.json".into(),
        read(&fixture("llama-3.1-8b/config.json")),
    );
    files.insert(
        "generation_config.json".into(),
        File::Bytes(br#"{"bos_token_id": 128000, "eos_token_id": 128001}"#.to_vec()),
    );
    files.insert("README.md".into(), File::Bytes(b"# a model card".to_vec()));
    files.insert(
        "original/consolidated.00.pth".into(),
        File::Shard {
            head: Vec::new(),
            len: 16_000_000_000,
        },
    );
    Repo {
        commit: commit_of(repo),
        files,
        behaviour,
    }
}

/// `repo` with `fixture`'s config and one small unsharded `model.safetensors`.
pub fn small_repo(repo: &str, fixture_name: &str, behaviour: Behaviour) -> Repo {
    let mut files = BTreeMap::new();
    let dir = fixture(fixture_name);
    for entry in std::fs::read_dir(&dir).unwrap() {
        let entry = entry.unwrap();
        files.insert(
            entry.file_name().to_string_lossy().into_owned(),
            read(&entry.path()),
        );
    }
    files.insert(
        "model.safetensors".into(),
        shard(&[("wte.weight".into(), "F32", vec![1000, 64])]),
    );
    Repo {
        commit: commit_of(repo),
        files,
        behaviour,
    }
}

/// The repositories the tests use, by id.
pub fn fixture_repos() -> BTreeMap<String, Repo> {
    let mut repos = BTreeMap::new();
    let llama = "meta-llama/Llama-3.1-8B";
    repos.insert(llama.to_string(), llama_repo(llama, 30, Behaviour::Normal));
    for (id, behaviour) in [
        ("org/gpt2", Behaviour::Normal),
        ("org/gated", Behaviour::Gated),
        ("org/private", Behaviour::Private),
        ("org/slow", Behaviour::Slow(Duration::from_secs(4))),
        ("org/flaky", Behaviour::DropFirst(1)),
        ("org/dropped", Behaviour::DropAlways),
    ] {
        repos.insert(id.to_string(), small_repo(id, "gpt2", behaviour));
    }
    let vl = "Qwen/Qwen2-VL-2B-Instruct";
    let mut qwen_vl = small_repo(vl, "qwen2-vl-2b-instruct", Behaviour::Normal);
    for tokenizer in ["tokenizer.json", "tokenizer_config.json"] {
        qwen_vl
            .files
            .insert(tokenizer.into(), File::Bytes(b"{}".to_vec()));
    }
    repos.insert(vl.into(), qwen_vl);
    let tiny = "org/tiny-llama";
    repos.insert(
        tiny.into(),
        small_repo(tiny, "../tiny/llama", Behaviour::Normal),
    );
    let vit = "google/vit-base-patch16-224";
    repos.insert(
        vit.into(),
        small_repo(vit, "vit-base-defaults", Behaviour::Normal),
    );
    let mut huge = small_repo("org/huge-header", "gpt2", Behaviour::Normal);
    let mut head = (200_000_000u64).to_le_bytes().to_vec();
    head.extend_from_slice(b"{}");
    huge.files.insert(
        "model.safetensors".into(),
        File::Shard {
            head,
            len: 300_000_000,
        },
    );
    repos.insert("org/huge-header".into(), huge);
    for (id, behaviour) in [
        (
            "org/hostile-etag",
            Behaviour::HostileEtag("\"../../../../tmp/x\""),
        ),
        (
            "org/hostile-commit",
            Behaviour::HostileCommit("../../../../tmp/x"),
        ),
        ("org/redirect-away", Behaviour::RedirectAway),
    ] {
        repos.insert(id.to_string(), small_repo(id, "gpt2", behaviour));
    }
    let mut nameless = small_repo("org/no-config", "gpt2", Behaviour::Normal);
    nameless.files.remove("config.json");
    repos.insert("org/no-config".into(), nameless);
    repos
}
