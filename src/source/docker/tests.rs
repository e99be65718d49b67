use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};

use super::*;

const PODMAN: &str = include_str!("testdata/podman-inspect.json");
/// Longest a test waits for the source.
const WAIT: Duration = Duration::from_secs(15);

/// A Docker Engine API on a unix socket, as small as the source needs:
/// `/version` answers `api` (and `min`, the oldest version it serves),
/// versioned requests below `min` are refused as Docker 29 refuses them,
/// `/containers/json` lists one container whose inspect answer is
/// podman's (while it runs), `/networks` one bridge network, `/events`
/// stays open and sends what [`FakeApi::event`] queues. While the API is
/// [`FakeApi::down`], every connection is closed at once, the event
/// stream included. Every request line is recorded.
struct FakeApi {
    requests: Arc<Mutex<Vec<String>>>,
    state: Arc<Engine>,
}

/// What the fake engine holds, shared with its connections.
#[derive(Default)]
struct Engine {
    down: std::sync::atomic::AtomicBool,
    /// Whether container c1 is gone.
    gone: std::sync::atomic::AtomicBool,
    events: Mutex<Vec<String>>,
}

/// `1.41` → (1, 41); `None` for anything else.
fn version(text: &str) -> Option<(u32, u32)> {
    let (major, minor) = text.split_once('.')?;
    Some((major.parse().ok()?, minor.parse().ok()?))
}

impl FakeApi {
    fn serve(socket: &Path, api: &'static str, min: &'static str) -> FakeApi {
        let listener = UnixListener::bind(socket).expect("bind the fake API");
        let requests: Arc<Mutex<Vec<String>>> = Arc::default();
        let state: Arc<Engine> = Arc::default();
        let (seen, engine) = (Arc::clone(&requests), Arc::clone(&state));
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(stream) = stream else { return };
                if engine.down.load(Ordering::SeqCst) {
                    continue;
                }
                let (seen, engine) = (Arc::clone(&seen), Arc::clone(&engine));
                std::thread::spawn(move || connection(stream, api, min, &seen, &engine));
            }
        });
        FakeApi { requests, state }
    }

    /// The daemon stops (`true`) or is back (`false`).
    fn down(&self, down: bool) {
        self.state.down.store(down, Ordering::SeqCst);
    }

    /// Container c1 dies: it is no longer listed, and its `die` event is
    /// sent.
    fn c1_dies(&self) {
        self.state.gone.store(true, Ordering::SeqCst);
        self.event(r#"{"Type":"container","Action":"die","Actor":{"ID":"c1","Attributes":{}}}"#);
    }

    fn event(&self, json: &str) {
        self.state.events.lock().unwrap().push(json.to_string());
    }

    /// The paths requested so far (without the query).
    fn paths(&self) -> Vec<String> {
        self.requests.lock().unwrap().clone()
    }
}

/// Serves the requests of one keep-alive connection.
fn connection(
    stream: UnixStream,
    api: &str,
    min: &str,
    seen: &Mutex<Vec<String>>,
    engine: &Engine,
) {
    let mut reader = BufReader::new(stream.try_clone().expect("clone the stream"));
    let mut writer = stream;
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line).unwrap_or(0) == 0 {
            return;
        }
        let target = line.split(' ').nth(1).unwrap_or_default();
        let path = target.split('?').next().unwrap_or_default().to_string();
        let mut length = 0;
        loop {
            let mut header = String::new();
            if reader.read_line(&mut header).unwrap_or(0) == 0 {
                return;
            }
            if header.trim().is_empty() {
                break;
            }
            if let Some((name, value)) = header.split_once(':') {
                if name.eq_ignore_ascii_case("content-length") {
                    length = value.trim().parse().unwrap_or(0);
                }
            }
        }
        let mut body = vec![0; length];
        if reader.read_exact(&mut body).is_err() {
            return;
        }
        seen.lock().unwrap().push(path.clone());
        // `/v1.41/containers/json` → (Some("1.41"), "/containers/json").
        let (asked, rest) = match path.strip_prefix("/v").and_then(|p| p.split_once('/')) {
            Some((v, rest)) if version(v).is_some() => (Some(v.to_string()), format!("/{rest}")),
            _ => (None, path.clone()),
        };
        let (status, answer) = match rest.as_str() {
            "/version" => (
                "200 OK",
                format!(r#"{{"Version":"fake","ApiVersion":"{api}","MinAPIVersion":"{min}"}}"#),
            ),
            _ if asked.as_deref().and_then(version) < version(min) && asked.is_some() => (
                "400 Bad Request",
                format!(
                    r#"{{"message":"client version {} is too old. Minimum supported API version is {min}, please upgrade your client to a newer version"}}"#,
                    asked.unwrap_or_default()
                ),
            ),
            _ if engine.down.load(Ordering::SeqCst) => return,
            "/containers/json" if engine.gone.load(Ordering::SeqCst) => ("200 OK", "[]".into()),
            "/containers/json" => ("200 OK", r#"[{"Id":"c1","Names":["/web-1"]}]"#.into()),
            "/containers/c1/json" if engine.gone.load(Ordering::SeqCst) => {
                ("404 Not Found", r#"{"message":"no such container"}"#.into())
            }
            "/containers/c1/json" => ("200 OK", PODMAN.to_string()),
            "/networks" => (
                "200 OK",
                r#"[{"Name":"podman","Driver":"bridge","IPAM":{"Config":[{"Subnet":"10.88.0.0/16","Gateway":"10.88.0.1"}]}},
                    {"Name":"lan","Driver":"macvlan","IPAM":{"Config":[{"Subnet":"192.168.1.0/24"}]}},
                    {"Name":"host","Driver":"host","IPAM":{"Config":[]}}]"#
                    .into(),
            ),
            "/events" => {
                let head = "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n";
                if writer.write_all(head.as_bytes()).is_err() {
                    return;
                }
                // Open, sending what is queued, until the daemon stops.
                while !engine.down.load(Ordering::SeqCst) {
                    let queued: Vec<String> = engine.events.lock().unwrap().drain(..).collect();
                    for json in queued {
                        let chunk = format!("{:x}\r\n{json}\n\r\n", json.len() + 1);
                        if writer.write_all(chunk.as_bytes()).is_err() {
                            return;
                        }
                    }
                    std::thread::sleep(Duration::from_millis(10));
                }
                return;
            }
            _ => ("404 Not Found", r#"{"message":"not found"}"#.into()),
        };
        let response = format!(
            "HTTP/1.1 {status}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{answer}",
            answer.len()
        );
        if writer.write_all(response.as_bytes()).is_err() {
            return;
        }
    }
}

/// A source following `socket`, with an empty policy directory; counts
/// its notifications.
fn source(dir: &Path, socket: &Path) -> (DockerSource, Arc<AtomicUsize>) {
    let policies = dir.join("policies");
    std::fs::create_dir_all(&policies).unwrap();
    let policies = Directory::start(&policies, Default::default(), || {}).unwrap();
    let config = DockerConfig {
        enabled: true,
        host: format!("unix://{}", socket.display()),
        ..DockerConfig::default()
    };
    let notified = Arc::new(AtomicUsize::new(0));
    let count = Arc::clone(&notified);
    let source = DockerSource::spawn(&config, "node-1", policies, Arc::default(), move || {
        count.fetch_add(1, Ordering::SeqCst);
    })
    .expect("the source starts");
    (source, notified)
}

/// Polls `latest` until it holds a snapshot, within [`WAIT`].
fn first_snapshot(source: &mut DockerSource) -> Arc<Snapshot> {
    let deadline = Instant::now() + WAIT;
    loop {
        if let Some(snapshot) = source.latest().expect("no policy problems") {
            return snapshot;
        }
        assert!(
            Instant::now() < deadline,
            "no snapshot within {WAIT:?}: {}",
            source.health().describe()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn pods(snapshot: &Snapshot) -> Vec<String> {
    snapshot
        .iter()
        .filter_map(|o| match o {
            Object::Pod(pod) => Some(format!("{}/{}", pod.namespace(), pod.metadata.name)),
            _ => None,
        })
        .collect()
}

/// The API version of a request path (`/v1.41/containers/json`).
fn path_version(path: &str) -> Option<(u32, u32)> {
    version(path.strip_prefix("/v")?.split_once('/')?.0)
}

#[test]
fn the_api_version_is_agreed_with_the_server() {
    // (the server's version, the oldest it serves, the version agreed):
    // podman 4.3; Docker 29, which refuses versioned requests below 1.44;
    // an engine newer than bollard.
    let bollards = bollard::API_DEFAULT_VERSION.to_string();
    for (api, min, agreed) in [
        ("1.41", "1.12", "1.41"),
        ("1.52", "1.44", "1.52"),
        ("1.99", "1.44", bollards.as_str()),
    ] {
        let dir = tempfile::tempdir().unwrap();
        let socket = dir.path().join("docker.sock");
        let server = FakeApi::serve(&socket, api, min);
        let (mut source, _) = source(dir.path(), &socket);
        let snapshot = first_snapshot(&mut source);
        assert_eq!(pods(&snapshot), ["shop/web-1"], "server {api}");
        let paths = server.paths();
        assert_eq!(
            paths.first().map(String::as_str),
            Some("/version"),
            "{paths:?}"
        );
        // bollard 0.21 requests unversioned paths (the server then answers
        // at its own version); a versioned one must not be below the
        // server's minimum.
        let listed: Vec<&String> = paths
            .iter()
            .filter(|p| p.contains("/containers/"))
            .collect();
        assert!(!listed.is_empty(), "{paths:?}");
        assert!(
            listed
                .iter()
                .all(|p| path_version(p).is_none_or(|v| Some(v) >= version(min))),
            "server {api}: {paths:?}"
        );
        let described = source.health().describe();
        assert!(
            described.contains(&format!("(API {agreed})")),
            "{described}"
        );
    }
}

#[test]
fn an_api_missing_at_start_is_retried_and_nothing_is_complete_until_it_answers() {
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("docker.sock");
    let (mut source, notified) = source(dir.path(), &socket);
    let health = source.health();
    let deadline = Instant::now() + WAIT;
    while !health.describe().contains("NOT REACHED YET") {
        assert!(Instant::now() < deadline, "{}", health.describe());
        std::thread::sleep(Duration::from_millis(50));
    }
    let down = health.describe();
    assert!(down.contains("the startup policy holds"), "{down}");
    assert_eq!(source.latest().unwrap(), None, "incomplete without the API");
    assert_eq!(notified.load(Ordering::SeqCst), 0);
    // The engine starts after the agent: picked up within the backoff
    // cap before the first list.
    let _server = FakeApi::serve(&socket, "1.41", "1.12");
    let served = Instant::now();
    let snapshot = first_snapshot(&mut source);
    assert!(
        served.elapsed() < BACKOFF_MAX + Duration::from_secs(3),
        "took {:?}",
        served.elapsed()
    );
    assert_eq!(pods(&snapshot), ["shop/web-1"]);
    assert_eq!(notified.load(Ordering::SeqCst), 1, "notified once");
    assert!(
        health.describe().ends_with("connected, 1 containers"),
        "{}",
        health.describe()
    );
}

#[test]
fn health_says_connecting_connected_or_unreachable() {
    let health = DockerHealth::new("unix:///run/docker.sock".into());
    assert!(
        health.describe().contains("connecting for"),
        "{}",
        health.describe()
    );
    assert_eq!(health.failed("no such file"), Change::NotReached);
    assert_eq!(health.failed("no such file"), Change::Same);
    let never = health.describe();
    assert!(never.contains("NOT REACHED YET"), "{never}");
    assert!(never.contains("2 failed requests"), "{never}");
    health.negotiated("1.41".into());
    health.published(3);
    assert_eq!(
        health.describe(),
        "docker unix:///run/docker.sock (API 1.41): connected, 3 containers"
    );
    assert_eq!(health.failed("connection refused"), Change::Lost);
    assert_eq!(health.failed("connection refused"), Change::Same);
    let down = health.describe();
    assert!(down.contains("UNREACHABLE"), "{down}");
    assert!(down.contains("4 failed requests"), "{down}");
    assert!(
        down.contains("the 3 containers last listed are unknown"),
        "{down}"
    );
    health.published(2);
    assert!(health.describe().ends_with("connected, 2 containers"));
}

/// The local Node's `podCIDRs` in the snapshot: the bridge networks'
/// subnets (not a macvlan network's, which is the host's LAN).
fn pod_cidrs(snapshot: &Snapshot) -> Vec<String> {
    snapshot
        .iter()
        .filter_map(|o| match o {
            Object::Node(node) if node.metadata.name == "node-1" => {
                Some(node.spec.pod_cidrs.clone())
            }
            _ => None,
        })
        .flatten()
        .collect()
}

/// Polls `latest` until `check` holds for it, within [`WAIT`].
fn wait_for(source: &mut DockerSource, what: &str, check: impl Fn(&Snapshot) -> bool) -> Instant {
    let deadline = Instant::now() + WAIT;
    loop {
        if let Some(snapshot) = source.latest().expect("no policy problems") {
            if check(&snapshot) {
                return Instant::now();
            }
        }
        assert!(
            Instant::now() < deadline,
            "{what}: {}",
            source.health().describe()
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// A container's `die` takes it out of the inventory at once (before the
/// settled relist asks the API); an API that goes away leaves the
/// networks' subnets and no container: no address is given to a
/// container that may not hold it any more, until the next list.
/// Mutation: keeping the last containers when the API is lost (not
/// clearing them in `Follower::run`) fails the second half.
#[test]
fn containers_leave_at_once_and_nothing_is_known_while_the_api_is_away() {
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("docker.sock");
    let server = FakeApi::serve(&socket, "1.41", "1.12");
    let (mut source, _) = source(dir.path(), &socket);
    let snapshot = first_snapshot(&mut source);
    assert_eq!(pods(&snapshot), ["shop/web-1"]);
    assert_eq!(pod_cidrs(&snapshot), ["10.88.0.0/16"]);
    let lists = || {
        server
            .paths()
            .iter()
            .filter(|p| p.ends_with("/containers/json"))
            .count()
    };
    let listed = lists();
    server.c1_dies();
    wait_for(&mut source, "the died container leaves", |s| {
        pods(s).is_empty()
    });
    assert_eq!(lists(), listed, "left before any relist");
    // Back, then the daemon goes: nothing is known but the ranges.
    server.state.gone.store(false, Ordering::SeqCst);
    server.event(r#"{"Type":"container","Action":"start","Actor":{"ID":"c1","Attributes":{}}}"#);
    wait_for(&mut source, "the started container is back", |s| {
        pods(s) == ["shop/web-1"]
    });
    server.down(true);
    wait_for(&mut source, "no container while the API is away", |s| {
        pods(s).is_empty() && pod_cidrs(s) == ["10.88.0.0/16"]
    });
    assert!(source.health().describe().contains("UNREACHABLE"));
    server.down(false);
    wait_for(&mut source, "listed again", |s| pods(s) == ["shop/web-1"]);
}

#[test]
fn events_are_followed_at_once_as_far_as_they_tell() {
    let event = |json: &str| step(&serde_json::from_str::<EventMessage>(json).unwrap());
    let container = |action: &str| {
        event(&format!(
            r#"{{"Type":"container","Action":"{action}","Actor":{{"ID":"c1"}}}}"#
        ))
    };
    for gone in ["die", "died", "destroy", "remove", "cleanup"] {
        assert_eq!(container(gone), Step::Gone("c1".into()), "{gone}");
    }
    for changed in ["start", "restart", "unpause", "rename"] {
        assert_eq!(container(changed), Step::Inspect("c1".into()), "{changed}");
    }
    for nothing in ["kill", "pause", "exec_start: sh", "health_status: healthy"] {
        assert_eq!(container(nothing), Step::Nothing, "{nothing}");
    }
    assert_eq!(
        event(
            r#"{"Type":"network","Action":"disconnect","Actor":{"ID":"n1","Attributes":{"container":"c1"}}}"#
        ),
        Step::Networks(Some("c1".into()))
    );
    assert_eq!(
        event(
            r#"{"Type":"network","Action":"create","Actor":{"ID":"n1","Attributes":{"name":"n"}}}"#
        ),
        Step::Networks(None)
    );
    assert_eq!(
        event(r#"{"Type":"daemon","Action":"reload","Actor":{"ID":"d"}}"#),
        Step::Relist
    );
}
