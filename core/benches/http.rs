//! HTTP request head parse + rule match per request.
//! Run: `cargo bench --bench http`.

use std::hint::black_box;

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use tollgate_core::http::{decide, HttpEvent, HttpRule, RequestTracker};
use tollgate_core::model::HttpProtocol;

const REQUEST: &[u8] = b"GET /api/v2/users/42?fields=name,email HTTP/1.1\r\n\
Host: foo.bar.com\r\n\
User-Agent: Mozilla/5.0 (X11; Linux x86_64; rv:128.0) Gecko/20100101 Firefox/128.0\r\n\
Accept: application/json\r\n\
Accept-Language: en-US,en;q=0.5\r\n\
Accept-Encoding: gzip, deflate, br\r\n\
Authorization: Bearer eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.e30.abc\r\n\
Connection: keep-alive\r\n\r\n";

fn rules() -> Vec<HttpProtocol> {
    vec![
        HttpProtocol {
            method: Some("POST".into()),
            host: Some("*.bar.com".into()),
            path: Some("/upload/*".into()),
        },
        HttpProtocol {
            method: Some("GET".into()),
            host: Some("foo.bar.com".into()),
            path: Some("/api/v2/*".into()),
        },
    ]
}

fn bench(c: &mut Criterion) {
    let rules = rules();
    let mut group = c.benchmark_group("http");
    group.throughput(Throughput::Elements(1));
    group.bench_function("parse+decide (keep-alive tracker)", |b| {
        let mut tracker = RequestTracker::default();
        b.iter(|| {
            tracker
                .feed(black_box(REQUEST))
                .iter()
                .all(|event| matches!(event, HttpEvent::Request(req) if decide(&rules, req)))
        })
    });
    let compiled: Vec<HttpRule> = rules.iter().map(HttpRule::new).collect();
    group.bench_function("parse+match (precompiled rules)", |b| {
        let mut tracker = RequestTracker::default();
        b.iter(|| {
            tracker.feed(black_box(REQUEST)).iter().all(|event| {
                matches!(event, HttpEvent::Request(req) if compiled.iter().any(|r| r.matches(req)))
            })
        })
    });
    group.bench_function("split head, 3 segments", |b| {
        let mut tracker = RequestTracker::default();
        b.iter(|| {
            let mut n = 0;
            for part in [&REQUEST[..20], &REQUEST[20..150], &REQUEST[150..]] {
                n += tracker.feed(black_box(part)).len();
            }
            n
        })
    });
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
