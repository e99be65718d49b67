use super::*;

fn flow(client_port: u16, direction: Direction) -> DnsFlow {
    DnsFlow {
        transport: Transport::Udp,
        client: SocketAddr::from(([10, 0, 0, 7], client_port)),
        server: SocketAddr::from(([10, 0, 0, 53], 53)),
        direction,
    }
}

fn query(id: u16, name: &str) -> DnsQuery {
    DnsQuery {
        id,
        questions: vec![Question {
            name: name.into(),
            qtype: 1,
            qclass: 1,
        }],
    }
}

fn table(max_outstanding: usize) -> OutstandingQueries {
    OutstandingQueries::new(QueryBounds {
        max_outstanding,
        timeout_secs: 30,
    })
}

#[test]
fn a_reply_answers_its_query_once() {
    let mut t = table(8);
    assert!(!t.asked(&flow(40000, Direction::Query), query(7, "a.test"), 0));
    let reply = flow(40000, Direction::Reply);
    assert_eq!(
        t.answered(&reply, &query(7, "a.test"), 10),
        Answered::Matched
    );
    assert_eq!(
        t.answered(&reply, &query(7, "a.test"), 20),
        Answered::Unasked
    );
    assert!(t.is_empty());
}

#[test]
fn another_id_port_transport_or_question_is_not_an_answer() {
    let mut t = table(8);
    t.asked(&flow(40000, Direction::Query), query(7, "a.test"), 0);
    let reply = flow(40000, Direction::Reply);
    assert_eq!(
        t.answered(&reply, &query(8, "a.test"), 1),
        Answered::Unasked
    );
    assert_eq!(
        t.answered(&flow(40001, Direction::Reply), &query(7, "a.test"), 1),
        Answered::Unasked
    );
    let tcp = DnsFlow {
        transport: Transport::Tcp,
        ..reply
    };
    assert_eq!(t.answered(&tcp, &query(7, "a.test"), 1), Answered::Unasked);
    // Another question keeps the query outstanding for its real answer.
    assert_eq!(
        t.answered(&reply, &query(7, "evil.test"), 1),
        Answered::OtherQuestion
    );
    let mut aaaa = query(7, "a.test");
    aaaa.questions[0].qtype = 28;
    assert_eq!(t.answered(&reply, &aaaa, 1), Answered::OtherQuestion);
    assert_eq!(
        t.answered(&reply, &query(7, "a.test"), 1),
        Answered::Matched
    );
}

#[test]
fn queries_time_out() {
    let mut t = table(8);
    t.asked(&flow(40000, Direction::Query), query(7, "a.test"), 1_000);
    let reply = flow(40000, Direction::Reply);
    assert_eq!(
        t.answered(&reply, &query(7, "a.test"), 31_000),
        Answered::Unasked
    );
    // A retransmission restarts the wait.
    t.asked(&flow(40000, Direction::Query), query(7, "a.test"), 1_000);
    t.asked(&flow(40000, Direction::Query), query(7, "a.test"), 20_000);
    assert_eq!(
        t.answered(&reply, &query(7, "a.test"), 49_999),
        Answered::Matched
    );
}

#[test]
fn expiry_forgets_the_queries_whose_wait_ended() {
    let mut t = table(8);
    t.asked(&flow(1, Direction::Query), query(1, "a.test"), 0);
    t.asked(&flow(2, Direction::Query), query(2, "b.test"), 10_000);
    assert_eq!(t.expire(29_999), 0);
    assert_eq!(t.expire(30_000), 1);
    assert_eq!(t.len(), 1);
    assert_eq!(t.expire(40_000), 1);
    assert!(t.is_empty());
}

#[test]
fn the_least_recently_asked_query_is_forgotten_at_the_bound() {
    let mut t = table(2);
    assert!(!t.asked(&flow(1, Direction::Query), query(1, "a.test"), 0));
    assert!(!t.asked(&flow(2, Direction::Query), query(2, "b.test"), 0));
    // A retransmission is not a new query: nothing is forgotten.
    assert!(!t.asked(&flow(2, Direction::Query), query(2, "b.test"), 0));
    assert!(t.asked(&flow(3, Direction::Query), query(3, "c.test"), 0));
    assert_eq!(t.len(), 2);
    assert_eq!(
        t.answered(&flow(1, Direction::Reply), &query(1, "a.test"), 1),
        Answered::Unasked
    );
    assert_eq!(
        t.answered(&flow(3, Direction::Reply), &query(3, "c.test"), 1),
        Answered::Matched
    );
}

/// Mutation: `awaits_all` returning true for any message keeps the worker
/// from reading the query copies again before judging a reply whose
/// query it has not read yet; this test fails.
#[test]
fn awaits_all_says_whether_every_reply_has_an_outstanding_id_on_its_flow() {
    let mut t = table(8);
    t.asked(&flow(40000, Direction::Query), query(7, "a.test"), 0);
    let reply = flow(40000, Direction::Reply);
    let message = |id: u16| {
        let mut m = id.to_be_bytes().to_vec();
        m.extend_from_slice(&[0x81, 0x80]);
        m
    };
    assert!(t.awaits_all(&reply, &[message(7)]));
    assert!(t.awaits_all(&reply, &[]));
    assert!(!t.awaits_all(&reply, &[message(7), message(8)]));
    assert!(!t.awaits_all(&flow(40001, Direction::Reply), &[message(7)]));
    assert!(!t.awaits_all(&reply, &[vec![0]]));
    // Nothing was answered or forgotten.
    assert_eq!(t.len(), 1);
}
