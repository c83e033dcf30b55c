//! A Kafka broker for tests and plain clients to set up and check its topics.
//!
//! The broker is the one `KAFKA_BOOTSTRAP` names (`scripts/test.sh` starts one
//! for a whole run), or else one this test process starts for itself from the
//! binary that `scripts/kafka-broker.sh install` leaves in the tools cache.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::KafkaError;
use rdkafka::message::{Header, Headers, Message, OwnedHeaders};
use rdkafka::producer::{FutureProducer, FutureRecord};
use rdkafka::{Offset, TopicPartitionList};

const READY_TIMEOUT: Duration = Duration::from_secs(60);
const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);

/// A record as read back from a topic. A header without a value reads as empty.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Record {
    pub partition: i32,
    pub offset: i64,
    pub key: Option<Vec<u8>>,
    pub value: Option<Vec<u8>>,
    pub headers: Vec<(String, Vec<u8>)>,
}

/// A record to send: key, value, partition (`None` lets the partitioner choose).
pub type Outgoing<'a> = (Option<&'a [u8]>, Option<&'a [u8]>, Option<i32>);

/// An outgoing record with headers.
pub type OutgoingWithHeaders<'a> = (
    Option<&'a [u8]>,
    Option<&'a [u8]>,
    Option<i32>,
    &'a [(&'a str, &'a [u8])],
);

/// The broker's address: `KAFKA_BOOTSTRAP`, or a broker started once for this process.
pub fn bootstrap() -> String {
    if let Ok(address) = std::env::var("KAFKA_BOOTSTRAP") {
        return address;
    }
    static BROKER: OnceLock<OwnBroker> = OnceLock::new();
    BROKER.get_or_init(OwnBroker::start).address.clone()
}

/// A broker that lives exactly as long as this test process.
///
/// Statics are never dropped, so nothing here could stop the broker at exit.
/// Instead a shell runs it and reads a pipe whose only writer is this process:
/// when the process ends, however it ends, the pipe closes and the shell stops
/// the broker and removes its directory.
struct OwnBroker {
    address: String,
    _watchdog: Child,
    _lifeline: ChildStdin,
}

impl OwnBroker {
    fn start() -> OwnBroker {
        let binary = nisshi_binary();
        let dir = tempfile::tempdir()
            .expect("a temp dir for the broker")
            .keep();
        let address = format!("127.0.0.1:{}", super::free_port());
        let listener = format!("tcp://{address}");
        let mut watchdog = Command::new("bash")
            .arg("-c")
            .arg(WATCHDOG)
            .arg("bash")
            .arg(&dir)
            .arg(&binary)
            .arg("broker")
            .args(["--listener-url", &listener])
            .args(["--advertised-listener-url", &listener])
            .args([
                "--storage-engine",
                "sqlite://broker.db?maintenance_interval=5s",
            ])
            .stdin(Stdio::piped())
            .spawn()
            .expect("start the Kafka broker");
        let lifeline = watchdog
            .stdin
            .take()
            .expect("the watchdog's stdin is piped");
        wait_ready(&address, &mut watchdog);
        OwnBroker {
            address,
            _watchdog: watchdog,
            _lifeline: lifeline,
        }
    }
}

/// `bash -c WATCHDOG bash DIR BROKER ARGS...` runs the broker in DIR, where its
/// sqlite:// path is resolved, until stdin closes or the broker exits.
const WATCHDOG: &str = r#"
dir=$1
shift
cd "$dir" || exit 1
exec 3<&0
"$@" <&- 3<&- >broker.log 2>&1 &
broker=$!
cat <&3 >/dev/null &
lifeline=$!
wait -n "$broker" "$lifeline"
status=$?
if kill -0 "$broker" 2>/dev/null; then
  kill -TERM "$broker"
  { sleep 5; kill -KILL "$broker" 2>/dev/null; } &
  killer=$!
  wait "$broker"
  kill "$killer" 2>/dev/null
else
  kill "$lifeline" 2>/dev/null
  echo "the Kafka broker exited; the end of its log:" >&2
  tail -n 20 broker.log >&2
fi
cd / && rm -rf "$dir"
exit "$status"
"#;

/// The broker binary, from the tools cache `scripts/kafka-broker.sh`
/// installs it into (the script prints its path).
fn nisshi_binary() -> PathBuf {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/kafka-broker.sh");
    let output = Command::new("bash")
        .arg(&script)
        .arg("install")
        .stderr(Stdio::inherit())
        .output()
        .expect("run scripts/kafka-broker.sh install");
    let binary = PathBuf::from(String::from_utf8_lossy(&output.stdout).trim());
    if !output.status.success() || !binary.is_file() {
        panic!("no Kafka broker: set KAFKA_BOOTSTRAP or run scripts/kafka-broker.sh install");
    }
    binary
}

/// The SCRAM user a [`SecureBroker`] knows.
pub const SASL_USER: &str = "weir-test";
pub const SASL_PASSWORD: &str = "kafka-over-tls";

/// Settings a client of a broker needs beyond its address, by address:
/// a [`SecureBroker`]'s TLS and SASL, so that every helper here reaches it.
static SECURITY: Mutex<BTreeMap<String, Vec<(String, String)>>> = Mutex::new(BTreeMap::new());

/// A broker of its own for one test that takes only TLS connections and
/// SASL/SCRAM-SHA-256 logins, with a self-signed certificate for
/// 127.0.0.1. It stops when the value is dropped.
pub struct SecureBroker {
    pub address: String,
    /// The librdkafka properties a client sets to log in.
    pub properties: Vec<(String, String)>,
    _watchdog: Child,
    _lifeline: ChildStdin,
}

impl SecureBroker {
    pub fn start() -> SecureBroker {
        let binary = nisshi_binary();
        let dir = tempfile::tempdir()
            .expect("a temp dir for the broker")
            .keep();
        let address = format!("127.0.0.1:{}", super::free_port());
        let (cert, key) = certificate(&dir);
        // Users live in the broker's storage: create one on a plain start,
        // then start again over the same storage with logins required.
        let mut plain = broker_command(&binary, &dir, &address)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start the Kafka broker");
        wait_ready(&address, &mut plain);
        let created = Command::new(&binary)
            .args(["user", "create", "--broker", &format!("tcp://{address}")])
            .args([SASL_USER, SASL_PASSWORD, "--mechanism", "scram256"])
            .output()
            .expect("run nisshi user create");
        assert!(
            created.status.success(),
            "creating the SCRAM user: {created:?}"
        );
        let _ = Command::new("kill").arg(plain.id().to_string()).status();
        plain.wait().expect("the plain broker stops");

        let properties: Vec<(String, String)> = [
            ("security.protocol", "SASL_SSL"),
            ("sasl.mechanism", "SCRAM-SHA-256"),
            ("sasl.username", SASL_USER),
            ("sasl.password", SASL_PASSWORD),
            ("ssl.ca.location", &cert),
        ]
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
        SECURITY
            .lock()
            .expect("security settings")
            .insert(address.clone(), properties.clone());
        let mut watchdog = Command::new("bash");
        watchdog.arg("-c").arg(WATCHDOG).arg("bash").arg(&dir);
        let mut secure = broker_command(&binary, &dir, &address);
        secure
            .arg("--authentication")
            .args(["--cert", &cert, "--key", &key]);
        watchdog.arg(secure.get_program()).args(secure.get_args());
        let mut watchdog = watchdog
            .stdin(Stdio::piped())
            .spawn()
            .expect("start the secure Kafka broker");
        let lifeline = watchdog
            .stdin
            .take()
            .expect("the watchdog's stdin is piped");
        wait_ready(&address, &mut watchdog);
        SecureBroker {
            address,
            properties,
            _watchdog: watchdog,
            _lifeline: lifeline,
        }
    }
}

fn broker_command(binary: &Path, dir: &Path, address: &str) -> Command {
    let listener = format!("tcp://{address}");
    let mut command = Command::new(binary);
    command
        .current_dir(dir)
        .arg("broker")
        .args(["--listener-url", &listener])
        .args(["--advertised-listener-url", &listener])
        .args(["--storage-engine", "sqlite://broker.db"]);
    command
}

/// A self-signed certificate for 127.0.0.1 and its key, in `dir`.
fn certificate(dir: &Path) -> (String, String) {
    let cert = dir.join("cert.pem").display().to_string();
    let key = dir.join("key.pem").display().to_string();
    let output = Command::new("openssl")
        .args([
            "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
        ])
        .args(["-subj", "/CN=localhost"])
        .args(["-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1"])
        .args(["-keyout", &key, "-out", &cert])
        .output()
        .expect("run openssl");
    assert!(output.status.success(), "{output:?}");
    (cert, key)
}

/// Waits until the broker answers a metadata request, which reads its storage.
fn wait_ready(address: &str, watchdog: &mut Child) {
    let deadline = Instant::now() + READY_TIMEOUT;
    loop {
        if let Ok(Some(status)) = watchdog.try_wait() {
            panic!("the Kafka broker exited ({status}) before it was ready; its log is above");
        }
        // librdkafka logs every refused connection, so wait for the port first.
        if std::net::TcpStream::connect(address).is_ok() && metadata_answers(address) {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "the Kafka broker did not answer within {} s",
            READY_TIMEOUT.as_secs()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn metadata_answers(address: &str) -> bool {
    let Ok(consumer) = client_config(address).create::<BaseConsumer>() else {
        return false;
    };
    consumer
        .fetch_metadata(None, Duration::from_secs(2))
        .is_ok_and(|metadata| !metadata.brokers().is_empty())
}

fn client_config(bootstrap: &str) -> ClientConfig {
    let mut config = ClientConfig::new();
    config.set("bootstrap.servers", bootstrap);
    if let Some(settings) = SECURITY.lock().expect("security settings").get(bootstrap) {
        for (key, value) in settings {
            config.set(key, value);
        }
    }
    config
}

/// A topic name no other call, test process or earlier run has used.
pub fn unique_topic(prefix: &str) -> String {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("the clock is after 1970")
        .as_nanos();
    format!("{prefix}-{}-{n}-{nanos}", std::process::id())
}

/// Creates a topic and waits until its metadata shows every partition.
pub async fn create_topic(bootstrap: &str, topic: &str, partitions: i32) {
    let admin: AdminClient<DefaultClientContext> = client_config(bootstrap)
        .create()
        .expect("a Kafka admin client");
    let new_topic = NewTopic::new(topic, partitions, TopicReplication::Fixed(1));
    let options = AdminOptions::new().operation_timeout(Some(REQUEST_TIMEOUT));
    let results = admin
        .create_topics([&new_topic], &options)
        .await
        .expect("a CreateTopics response");
    for result in results {
        if let Err((name, code)) = result {
            panic!("creating topic {name} failed: {code}");
        }
    }
    let bootstrap = bootstrap.to_owned();
    let topic = topic.to_owned();
    blocking(move || {
        let deadline = Instant::now() + REQUEST_TIMEOUT;
        while partition_count(&bootstrap, &topic) != Some(partitions) {
            assert!(Instant::now() < deadline, "topic {topic} did not appear");
            std::thread::sleep(Duration::from_millis(50));
        }
    })
    .await;
}

/// Sends records in order and waits until the broker has acknowledged every one.
pub async fn produce(bootstrap: &str, topic: &str, records: &[Outgoing<'_>]) {
    let with_headers: Vec<OutgoingWithHeaders<'_>> = records
        .iter()
        .map(|&(key, value, partition)| (key, value, partition, &[][..]))
        .collect();
    produce_with_headers(bootstrap, topic, &with_headers).await;
}

/// Like [`produce`], with headers on each record.
pub async fn produce_with_headers(
    bootstrap: &str,
    topic: &str,
    records: &[OutgoingWithHeaders<'_>],
) {
    let producer: FutureProducer = client_config(bootstrap)
        .set("enable.idempotence", "false")
        .set("message.timeout.ms", "30000")
        .create()
        .expect("a Kafka producer");
    // Enqueue everything before awaiting, so records travel in batches.
    let mut deliveries = Vec::with_capacity(records.len());
    for &(key, value, partition, headers) in records {
        let mut record = FutureRecord::<[u8], [u8]>::to(topic).headers(owned_headers(headers));
        if let Some(key) = key {
            record = record.key(key);
        }
        if let Some(value) = value {
            record = record.payload(value);
        }
        if let Some(partition) = partition {
            record = record.partition(partition);
        }
        match producer.send_result(record) {
            Ok(delivery) => deliveries.push(delivery),
            Err((error, _)) => panic!("enqueueing a record for {topic} failed: {error}"),
        }
    }
    for delivery in deliveries {
        if let Err((error, _)) = delivery
            .await
            .expect("the producer outlives its deliveries")
        {
            panic!("producing to {topic} failed: {error}");
        }
    }
}

fn owned_headers(headers: &[(&str, &[u8])]) -> OwnedHeaders {
    headers
        .iter()
        .fold(OwnedHeaders::new(), |owned, &(key, value)| {
            owned.insert(Header {
                key,
                value: Some(value),
            })
        })
}

/// Every record of every partition from the beginning up to the high watermark
/// the call starts with, ordered by partition and offset.
pub async fn consume_all(
    bootstrap: &str,
    topic: &str,
    read_committed: bool,
    timeout: Duration,
) -> Vec<Record> {
    let bootstrap = bootstrap.to_owned();
    let topic = topic.to_owned();
    blocking(move || read_all(&bootstrap, &topic, read_committed, timeout)).await
}

fn read_all(bootstrap: &str, topic: &str, read_committed: bool, timeout: Duration) -> Vec<Record> {
    let isolation = if read_committed {
        "read_committed"
    } else {
        "read_uncommitted"
    };
    // librdkafka will not assign partitions without a group id; with explicit
    // assignment and no commits the group never comes into play.
    let consumer: BaseConsumer = client_config(bootstrap)
        .set("group.id", "weir-tests-reader")
        .set("isolation.level", isolation)
        .set("enable.auto.commit", "false")
        .set("enable.partition.eof", "true")
        .create()
        .expect("a Kafka consumer");
    let ends = watermarks_of(&consumer, topic);
    let mut assignment = TopicPartitionList::new();
    for partition in 0..ends.len() {
        assignment
            .add_partition_offset(topic, partition_id(partition), Offset::Beginning)
            .expect("a valid offset");
    }
    consumer.assign(&assignment).expect("assign partitions");

    // A partition is done at its end, which read_committed may reach by
    // skipping control records rather than by reading the last offset.
    let mut done: Vec<bool> = ends.iter().map(|&end| end == 0).collect();
    let mut records = Vec::new();
    let deadline = Instant::now() + timeout;
    while done.contains(&false) {
        assert!(
            Instant::now() < deadline,
            "reading {topic} timed out; read {} records, ends {ends:?}, done {done:?}",
            records.len()
        );
        match consumer.poll(Duration::from_millis(100)) {
            None => {}
            Some(Ok(message)) => {
                let index = partition_index(message.partition());
                if message.offset() < ends[index] {
                    records.push(record_of(&message));
                }
                if message.offset() + 1 >= ends[index] {
                    done[index] = true;
                }
            }
            Some(Err(KafkaError::PartitionEOF(partition))) => {
                done[partition_index(partition)] = true
            }
            Some(Err(error)) => panic!("reading {topic} failed: {error}"),
        }
    }
    records.sort_by_key(|record| (record.partition, record.offset));
    records
}

fn record_of(message: &impl Message) -> Record {
    let headers = message
        .headers()
        .map(|headers| {
            headers
                .iter()
                .map(|header| {
                    (
                        header.key.to_owned(),
                        header.value.unwrap_or_default().to_vec(),
                    )
                })
                .collect()
        })
        .unwrap_or_default();
    Record {
        partition: message.partition(),
        offset: message.offset(),
        key: message.key().map(<[u8]>::to_vec),
        value: message.payload().map(<[u8]>::to_vec),
        headers,
    }
}

/// The high watermark of each partition, in partition order.
pub async fn high_watermarks(bootstrap: &str, topic: &str) -> Vec<i64> {
    let bootstrap = bootstrap.to_owned();
    let topic = topic.to_owned();
    blocking(move || {
        let consumer: BaseConsumer = client_config(&bootstrap)
            .create()
            .expect("a Kafka consumer");
        watermarks_of(&consumer, &topic)
    })
    .await
}

fn watermarks_of(consumer: &BaseConsumer, topic: &str) -> Vec<i64> {
    let partitions = topic_partitions(consumer, topic)
        .unwrap_or_else(|| panic!("topic {topic} has no metadata"));
    (0..partitions)
        .map(|partition| {
            let (_low, high) = consumer
                .fetch_watermarks(topic, partition, REQUEST_TIMEOUT)
                .unwrap_or_else(|error| panic!("watermarks of {topic}/{partition}: {error}"));
            high
        })
        .collect()
}

/// The broker's topics whose names start with `prefix`.
pub async fn topics_named(bootstrap: &str, prefix: &str) -> Vec<String> {
    let (bootstrap, prefix) = (bootstrap.to_owned(), prefix.to_owned());
    blocking(move || {
        let consumer: BaseConsumer = client_config(&bootstrap)
            .create()
            .expect("a Kafka consumer");
        let metadata = consumer
            .fetch_metadata(None, REQUEST_TIMEOUT)
            .expect("the broker's topics");
        metadata
            .topics()
            .iter()
            .map(|t| t.name().to_string())
            .filter(|name| name.starts_with(&prefix))
            .collect()
    })
    .await
}

fn partition_count(bootstrap: &str, topic: &str) -> Option<i32> {
    let consumer: BaseConsumer = client_config(bootstrap).create().expect("a Kafka consumer");
    topic_partitions(&consumer, topic)
}

/// How many partitions the topic has, or `None` while the broker does not know it.
fn topic_partitions(consumer: &BaseConsumer, topic: &str) -> Option<i32> {
    let metadata = consumer.fetch_metadata(Some(topic), REQUEST_TIMEOUT).ok()?;
    let topic = metadata.topics().iter().find(|t| t.name() == topic)?;
    if topic.error().is_some() || topic.partitions().is_empty() {
        return None;
    }
    Some(partition_id(topic.partitions().len()))
}

fn partition_id(index: usize) -> i32 {
    i32::try_from(index).expect("fewer than 2^31 partitions")
}

fn partition_index(partition: i32) -> usize {
    usize::try_from(partition).expect("partition ids are not negative")
}

/// librdkafka's metadata and watermark calls block; keep them off the test's runtime.
async fn blocking<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
    tokio::task::spawn_blocking(f)
        .await
        .unwrap_or_else(|panic| std::panic::resume_unwind(panic.into_panic()))
}
