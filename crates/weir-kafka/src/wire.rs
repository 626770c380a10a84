//! A small blocking client of Kafka's wire protocol, for what librdkafka does not offer: asking
//! a transaction coordinator to end a transaction with a producer id and epoch recorded in a
//! checkpoint, initialising a transactional id to learn its producer id and epoch, reading raw
//! record batches with their control markers, and a few administrative requests.
//!
//! One request at a time per connection, non-flexible request versions that every broker
//! since Kafka 2.x understands.

use std::io::{Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::time::Duration;

use bytes::{Buf, BufMut, Bytes, BytesMut};
use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::{
    ApiKey, CreatePartitionsRequest, CreateTopicsRequest, EndTxnRequest, FetchRequest,
    FetchResponse, FindCoordinatorRequest, InitProducerIdRequest, MetadataRequest,
    MetadataResponse, RequestHeader, TopicName, TransactionalId,
};
use kafka_protocol::protocol::{
    encode_request_header_into_buffer, Decodable, HeaderVersion, Request, StrBytes,
};

use crate::error::KafkaError;

const CLIENT_ID: &str = "weir";
const IO_TIMEOUT: Duration = Duration::from_secs(30);

/// A connection to one broker.
pub struct WireClient {
    address: String,
    /// `None` after a failed exchange: some brokers answer an error by closing the
    /// connection, so the next request opens a new one.
    stream: Option<TcpStream>,
    correlation: i32,
    timeout: Duration,
}

fn open(address: &str) -> Result<TcpStream, KafkaError> {
    let broker = |message: String| KafkaError::Broker {
        what: format!("connecting to {address}"),
        message,
    };
    let addrs: Vec<_> = address
        .to_socket_addrs()
        .map_err(|e| broker(e.to_string()))?
        .collect();
    let mut last = None;
    for addr in addrs {
        match TcpStream::connect_timeout(&addr, IO_TIMEOUT) {
            Ok(stream) => {
                stream.set_read_timeout(Some(IO_TIMEOUT)).ok();
                stream.set_write_timeout(Some(IO_TIMEOUT)).ok();
                stream.set_nodelay(true).ok();
                return Ok(stream);
            }
            Err(e) => last = Some(e),
        }
    }
    Err(broker(
        last.map_or("no address".to_string(), |e| e.to_string()),
    ))
}

/// A producer id and epoch, as the transaction coordinator hands them out.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ProducerIdentity {
    pub id: i64,
    pub epoch: i16,
}

impl WireClient {
    /// Connects to `address` (host:port).
    pub fn connect(address: &str) -> Result<WireClient, KafkaError> {
        Ok(WireClient {
            address: address.to_string(),
            stream: Some(open(address)?),
            correlation: 0,
            timeout: IO_TIMEOUT,
        })
    }

    /// Connects to the first of a comma-separated list of bootstrap servers that answers.
    pub fn bootstrap(servers: &str) -> Result<WireClient, KafkaError> {
        let mut last = None;
        for server in servers.split(',').map(str::trim).filter(|s| !s.is_empty()) {
            match WireClient::connect(server) {
                Ok(client) => return Ok(client),
                Err(e) => last = Some(e),
            }
        }
        Err(last.unwrap_or_else(|| KafkaError::Config("no bootstrap servers given".into())))
    }

    /// Sends `request` at `version` and waits for its response.
    pub fn send<R: Request>(
        &mut self,
        request: &R,
        version: i16,
    ) -> Result<R::Response, KafkaError> {
        let result = self.exchange(request, version);
        if result.is_err() {
            self.stream = None;
        }
        result
    }

    fn exchange<R: Request>(
        &mut self,
        request: &R,
        version: i16,
    ) -> Result<R::Response, KafkaError> {
        let key = ApiKey::try_from(R::KEY).map_err(|_| self.protocol("unknown API key"))?;
        let what = format!("{key:?} to {}", self.address);
        let failed = |message: String| KafkaError::Broker {
            what: what.clone(),
            message,
        };
        self.correlation = self.correlation.wrapping_add(1);
        let header = RequestHeader::default()
            .with_request_api_key(R::KEY)
            .with_request_api_version(version)
            .with_correlation_id(self.correlation)
            .with_client_id(Some(StrBytes::from_static_str(CLIENT_ID)));
        let mut body = BytesMut::new();
        encode_request_header_into_buffer(&mut body, &header).map_err(|e| failed(e.to_string()))?;
        request
            .encode(&mut body, version)
            .map_err(|e| failed(e.to_string()))?;
        let mut frame = BytesMut::with_capacity(body.len() + 4);
        frame.put_i32(body.len() as i32);
        frame.put_slice(&body);
        if self.stream.is_none() {
            let stream = open(&self.address)?;
            stream.set_read_timeout(Some(self.timeout)).ok();
            self.stream = Some(stream);
        }
        let stream = self.stream.as_mut().expect("connected above");
        stream
            .write_all(&frame)
            .map_err(|e| failed(e.to_string()))?;

        let mut size = [0u8; 4];
        stream.read_exact(&mut size).map_err(|e| {
            failed(if e.kind() == std::io::ErrorKind::UnexpectedEof {
                "the broker closed the connection instead of answering (this broker does so \
                 for errors such as a fenced producer)"
                    .to_string()
            } else {
                e.to_string()
            })
        })?;
        let size = i32::from_be_bytes(size);
        if !(4..=512 * 1024 * 1024).contains(&size) {
            return Err(failed(format!("response of {size} bytes")));
        }
        let mut response = vec![0u8; size as usize];
        stream
            .read_exact(&mut response)
            .map_err(|e| failed(e.to_string()))?;
        let mut response = Bytes::from(response);
        let correlation = response.get_i32();
        if correlation != self.correlation {
            return Err(failed(format!(
                "response to request {correlation}, expected {}",
                self.correlation
            )));
        }
        if R::Response::header_version(version) >= 1 {
            skip_tagged_fields(&mut response).map_err(|e| failed(e.to_string()))?;
        }
        R::Response::decode(&mut response, version).map_err(|e| failed(e.to_string()))
    }

    fn protocol(&self, message: &str) -> KafkaError {
        KafkaError::Broker {
            what: format!("a request to {}", self.address),
            message: message.to_string(),
        }
    }

    /// Waits at most `timeout` for each answer from now on (30 s by default).
    pub fn set_timeout(&mut self, timeout: Duration) {
        self.timeout = timeout;
        if let Some(stream) = &self.stream {
            stream.set_read_timeout(Some(timeout)).ok();
        }
    }

    /// The transaction coordinator of `transactional_id`, as host:port.
    pub fn transaction_coordinator(
        &mut self,
        transactional_id: &str,
    ) -> Result<String, KafkaError> {
        let request = FindCoordinatorRequest::default()
            .with_key(StrBytes::from_string(transactional_id.to_string()))
            .with_key_type(1);
        let response = self.send(&request, 2)?;
        check(
            response.error_code,
            &format!("finding the coordinator of transaction {transactional_id}"),
        )?;
        Ok(format!("{}:{}", response.host.as_str(), response.port))
    }

    /// Initialises `transactional_id` on its coordinator (this client must be connected to
    /// it): fences every producer that used the id before, aborts its open transaction, and
    /// returns the id's producer id and new epoch (epoch 0 for an id never used before).
    pub fn init_producer_id(
        &mut self,
        transactional_id: &str,
        transaction_timeout_ms: i32,
    ) -> Result<ProducerIdentity, KafkaError> {
        let request = InitProducerIdRequest::default()
            .with_transactional_id(Some(TransactionalId(StrBytes::from_string(
                transactional_id.to_string(),
            ))))
            .with_transaction_timeout_ms(transaction_timeout_ms)
            .with_producer_id((-1).into())
            .with_producer_epoch(-1);
        // Coordinator loading, or a previous transaction still being completed: retry.
        for attempt in 0.. {
            let response = self.send(&request, 3)?;
            match ResponseError::try_from_code(response.error_code) {
                None => {
                    return Ok(ProducerIdentity {
                        id: response.producer_id.0,
                        epoch: response.producer_epoch,
                    })
                }
                Some(
                    ResponseError::ConcurrentTransactions
                    | ResponseError::CoordinatorLoadInProgress,
                ) if attempt < 100 => std::thread::sleep(Duration::from_millis(50)),
                Some(e) => {
                    return Err(KafkaError::Broker {
                        what: format!("initialising transactional id {transactional_id}"),
                        message: e.to_string(),
                    })
                }
            }
        }
        unreachable!("the loop above returns")
    }

    /// Ends the transaction of `transactional_id` with the given producer identity (this
    /// client must be connected to its coordinator): commits it or aborts it. Committing a
    /// transaction that was already committed by the same identity succeeds again.
    pub fn end_transaction(
        &mut self,
        transactional_id: &str,
        producer: ProducerIdentity,
        commit: bool,
    ) -> Result<(), KafkaError> {
        let request = EndTxnRequest::default()
            .with_transactional_id(TransactionalId(StrBytes::from_string(
                transactional_id.to_string(),
            )))
            .with_producer_id(producer.id.into())
            .with_producer_epoch(producer.epoch)
            .with_committed(commit);
        for attempt in 0.. {
            let response = self.send(&request, 1)?;
            match ResponseError::try_from_code(response.error_code) {
                None => return Ok(()),
                Some(
                    ResponseError::ConcurrentTransactions
                    | ResponseError::CoordinatorLoadInProgress,
                ) if attempt < 100 => std::thread::sleep(Duration::from_millis(50)),
                Some(e) => {
                    return Err(KafkaError::Broker {
                        what: format!(
                            "{} transaction {transactional_id} (producer {} epoch {})",
                            if commit { "committing" } else { "aborting" },
                            producer.id,
                            producer.epoch
                        ),
                        message: e.to_string(),
                    })
                }
            }
        }
        unreachable!("the loop above returns")
    }

    /// The topics' metadata (all topics for `None`).
    pub fn metadata(&mut self, topics: Option<&[&str]>) -> Result<MetadataResponse, KafkaError> {
        use kafka_protocol::messages::metadata_request::MetadataRequestTopic;
        let request = MetadataRequest::default().with_topics(topics.map(|topics| {
            topics
                .iter()
                .map(|t| {
                    MetadataRequestTopic::default()
                        .with_name(Some(TopicName(StrBytes::from_string(t.to_string()))))
                })
                .collect()
        }));
        self.send(&request, 1)
    }

    /// The number of partitions of `topic`, or `None` if it does not exist.
    pub fn partition_count(&mut self, topic: &str) -> Result<Option<i32>, KafkaError> {
        let metadata = self.metadata(Some(&[topic]))?;
        Ok(metadata
            .topics
            .iter()
            .find(|t| t.name.as_ref().is_some_and(|n| n.0.as_str() == topic))
            .filter(|t| t.error_code == 0)
            .map(|t| t.partitions.len() as i32))
    }

    /// Creates `topic` with `partitions` partitions (replication factor 1).
    pub fn create_topic(&mut self, topic: &str, partitions: i32) -> Result<(), KafkaError> {
        use kafka_protocol::messages::create_topics_request::CreatableTopic;
        let request = CreateTopicsRequest::default()
            .with_topics(vec![CreatableTopic::default()
                .with_name(TopicName(StrBytes::from_string(topic.to_string())))
                .with_num_partitions(partitions)
                .with_replication_factor(1)])
            .with_timeout_ms(30_000);
        let response = self.send(&request, 2)?;
        for result in &response.topics {
            check(result.error_code, &format!("creating topic {topic}"))?;
        }
        Ok(())
    }

    /// Grows `topic` to `partitions` partitions in all (some brokers, among them tansu 0.6,
    /// do not implement this request and close the connection).
    pub fn create_partitions(&mut self, topic: &str, partitions: i32) -> Result<(), KafkaError> {
        use kafka_protocol::messages::create_partitions_request::CreatePartitionsTopic;
        let request = CreatePartitionsRequest::default()
            .with_topics(vec![CreatePartitionsTopic::default()
                .with_name(TopicName(StrBytes::from_string(topic.to_string())))
                .with_count(partitions)])
            .with_timeout_ms(30_000);
        let response = self.send(&request, 1)?;
        for result in &response.results {
            check(
                result.error_code,
                &format!("growing topic {topic} to {partitions} partitions"),
            )?;
        }
        Ok(())
    }

    /// One fetch of `topic`'s `partition` from `offset`, uncommitted records included (the
    /// caller sorts out transactions from the control markers).
    pub fn fetch_raw(
        &mut self,
        topic: &str,
        partition: i32,
        offset: i64,
        max_bytes: i32,
    ) -> Result<RawFetch, KafkaError> {
        use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
        let request = FetchRequest::default()
            .with_replica_id((-1).into())
            // Some brokers answer an empty response at once to a wait of 0.
            .with_max_wait_ms(100)
            .with_min_bytes(1)
            .with_session_epoch(-1)
            .with_max_bytes(max_bytes)
            .with_isolation_level(0)
            .with_topics(vec![FetchTopic::default()
                .with_topic(TopicName(StrBytes::from_string(topic.to_string())))
                .with_partitions(vec![FetchPartition::default()
                    .with_partition(partition)
                    .with_fetch_offset(offset)
                    .with_partition_max_bytes(max_bytes)])]);
        let response: FetchResponse = self.send(&request, 4)?;
        let what = format!("fetching {topic}[{partition}] from offset {offset}");
        let data = response
            .responses
            .into_iter()
            .flat_map(|t| t.partitions)
            .find(|p| p.partition_index == partition)
            .ok_or_else(|| KafkaError::Broker {
                what: what.clone(),
                message: "no data for the partition in the response".into(),
            })?;
        check(data.error_code, &what)?;
        Ok(RawFetch {
            high_watermark: data.high_watermark,
            records: data.records.unwrap_or_default(),
        })
    }
}

/// What one raw fetch returned: encoded record batches and the partition's high watermark.
pub struct RawFetch {
    pub high_watermark: i64,
    pub records: Bytes,
}

fn check(code: i16, what: &str) -> Result<(), KafkaError> {
    match ResponseError::try_from_code(code) {
        None => Ok(()),
        Some(e) => Err(KafkaError::Broker {
            what: what.to_string(),
            message: e.to_string(),
        }),
    }
}

/// Skips a response header's tagged fields (flexible versions).
fn skip_tagged_fields(buf: &mut Bytes) -> Result<(), KafkaError> {
    let count = read_unsigned_varint(buf)?;
    for _ in 0..count {
        let _tag = read_unsigned_varint(buf)?;
        let size = read_unsigned_varint(buf)? as usize;
        if buf.remaining() < size {
            return Err(KafkaError::Broker {
                what: "decoding a response header".into(),
                message: "truncated tagged field".into(),
            });
        }
        buf.advance(size);
    }
    Ok(())
}

fn read_unsigned_varint(buf: &mut Bytes) -> Result<u32, KafkaError> {
    let mut value = 0u32;
    for shift in (0..35).step_by(7) {
        if !buf.has_remaining() {
            break;
        }
        let byte = buf.get_u8();
        value |= u32::from(byte & 0x7f) << shift;
        if byte & 0x80 == 0 {
            return Ok(value);
        }
    }
    Err(KafkaError::Broker {
        what: "decoding a response header".into(),
        message: "bad varint".into(),
    })
}
