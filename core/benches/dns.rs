//! DNS parse + FQDN learn per reply (target: ≥ 200,000 replies/s per core).
//! Run: `cargo bench --bench dns`.
#![allow(clippy::disallowed_methods)] // benches read the clock.

use std::hint::black_box;
use std::net::{IpAddr, Ipv4Addr};
use std::time::Instant;

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use hickory_proto::op::{Message, MessageType, OpCode, Query};
use hickory_proto::rr::rdata::{A, CNAME};
use hickory_proto::rr::{Name, RData, Record, RecordType};
use tollgate_core::dns::{parse_reply, Resolution};
use tollgate_core::fqdn::{
    DnsSnooper, FqdnLearner, FqdnPattern, LearnerConfig, OutstandingQueries, QueryBounds, ReplyPath,
};
use tollgate_core::fqdn::{FqdnLookup, FqdnTable, Source};

fn name(text: &str) -> Name {
    Name::from_ascii(text).expect("bench names are valid")
}

/// `www.github.com` → CNAME `github.com` → two A records, as a resolver
/// answers it.
fn reply() -> Vec<u8> {
    reply_with([140, 82, 121], [3, 4])
}

fn reply_with(prefix: [u8; 3], lasts: [u8; 2]) -> Vec<u8> {
    let mut message = Message::new(7, MessageType::Response, OpCode::Query);
    message.add_query(Query::query(name("www.github.com."), RecordType::A));
    message.add_answer(Record::from_rdata(
        name("www.github.com."),
        3600,
        RData::CNAME(CNAME(name("github.com."))),
    ));
    for last in lasts {
        message.add_answer(Record::from_rdata(
            name("github.com."),
            60,
            RData::A(A(Ipv4Addr::new(prefix[0], prefix[1], prefix[2], last))),
        ));
    }
    message.to_vec().expect("bench message encodes")
}

fn selectors() -> Vec<FqdnPattern> {
    let mut patterns: Vec<FqdnPattern> = (0..48)
        .map(|i| FqdnPattern::new(&format!("*.service{i}.example.com")))
        .collect();
    patterns.push(FqdnPattern::new("*github.com"));
    patterns.push(FqdnPattern::new("www.github.com"));
    patterns
}

fn bench(c: &mut Criterion) {
    let bytes = reply();
    let mut group = c.benchmark_group("dns");
    group.throughput(Throughput::Elements(1));
    group.bench_function("parse_reply+resolved", |b| {
        b.iter(|| parse_reply(black_box(&bytes)).map(|r| r.resolved()))
    });
    group.bench_function("parse+learn (50 selectors, refresh path)", |b| {
        let mut learner = FqdnLearner::new(selectors(), LearnerConfig::default());
        let mut now = 0u64;
        b.iter(|| {
            now += 1_500;
            learner.learn_reply(black_box(&bytes), now)
        })
    });
    // Every reply brings two new addresses: the per-name bound (128) is
    // hit after 64 replies, so each learn also evicts two entries.
    let rotating: Vec<Vec<u8>> = (0..1024u32)
        .map(|i| {
            reply_with(
                [10, (i >> 8) as u8, 0],
                [(i & 0xff) as u8, 255 - (i & 0xff) as u8],
            )
        })
        .collect();
    group.bench_function("parse+learn (new addresses, evicting)", |b| {
        let mut learner = FqdnLearner::new(selectors(), LearnerConfig::default());
        let mut now = 0u64;
        let mut i = 0usize;
        b.iter(|| {
            now += 1;
            i = (i + 1) % rotating.len();
            learner.learn_reply(black_box(&rotating[i]), now)
        })
    });
    // The DNS worker's pure part for one queued UDP packet: IP/UDP slicing,
    // parse, learn.
    let packet = {
        let mut out = Vec::new();
        etherparse::PacketBuilder::ipv4([10, 0, 0, 53], [10, 0, 0, 7], 64)
            .udp(53, 40000)
            .write(&mut out, &bytes)
            .expect("bench packet encodes");
        out
    };
    // The query the reply answers, from the client.
    let query = {
        let mut message = Message::new(7, MessageType::Query, OpCode::Query);
        message.add_query(Query::query(name("www.github.com."), RecordType::A));
        let mut out = Vec::new();
        etherparse::PacketBuilder::ipv4([10, 0, 0, 7], [10, 0, 0, 53], 64)
            .udp(40000, 53)
            .write(&mut out, &message.to_vec().expect("bench query encodes"))
            .expect("bench packet encodes");
        out
    };
    group.bench_function(
        "query+reply step (UDP packets: snoop, remember, match, learn; refresh path)",
        |b| {
            let mut snooper = DnsSnooper::new(Vec::new(), 1024, 16 * 1024);
            let (table, _) =
                FqdnTable::restore(selectors(), LearnerConfig::default(), &[], Instant::now());
            let mut queries = OutstandingQueries::new(QueryBounds::default());
            let path = |_| ReplyPath {
                arrived: 2,
                route: Some(2),
            };
            let mut now = 0u64;
            b.iter(|| {
                now += 1_500;
                let asked = snooper.snoop_via(black_box(&query), path);
                table.on_packet(&asked, &mut queries, now);
                let answered = snooper.snoop_via(black_box(&packet), path);
                table.on_packet(&answered, &mut queries, now)
            })
        },
    );
    group.finish();

    // The DNS worker's once-a-second expiry with the learner at its bound
    // (65,536 records, 4 per name as in the fresh-names scenario), none due.
    let mut full = FqdnLearner::new(selectors(), LearnerConfig::default());
    for i in 0..16_384u32 {
        let resolutions: Vec<Resolution> = (0..4u32)
            .map(|k| Resolution {
                names: vec![format!("n{i}.service1.example.com")],
                address: IpAddr::V4(Ipv4Addr::from(0x0a00_0000 | (i * 4 + k))),
                ttl: 300,
            })
            .collect();
        full.learn_from(&resolutions, Source::Snooped, 0);
    }
    c.bench_function("expire (65,536 records, none due)", |b| {
        b.iter(|| full.expire(black_box(1_000)))
    });

    // What a connection worker pays per FQDN peer: the mirror's read lock
    // and one lookup (uncontended).
    let (mirror, _) =
        FqdnTable::restore(selectors(), LearnerConfig::default(), &[], Instant::now());
    let pattern = FqdnPattern::new("*github.com");
    let address = "140.82.121.3".parse().expect("address");
    c.bench_function("mirror lookup (read lock)", |b| {
        b.iter(|| {
            mirror
                .lookup(Instant::now())
                .resolves_to(black_box(&pattern), black_box(address))
        })
    });
}

criterion_group!(benches, bench);
criterion_main!(benches);
