use proptest::prelude::*;

use super::*;

fn vec16(body: &[u8]) -> Vec<u8> {
    let mut out = (body.len() as u16).to_be_bytes().to_vec();
    out.extend_from_slice(body);
    out
}

fn extension(kind: u16, data: &[u8]) -> Vec<u8> {
    let mut out = kind.to_be_bytes().to_vec();
    out.extend(vec16(data));
    out
}

fn sni_extension(names: &[(u8, &str)]) -> Vec<u8> {
    let mut list = Vec::new();
    for (kind, name) in names {
        list.push(*kind);
        list.extend(vec16(name.as_bytes()));
    }
    extension(0, &vec16(&list))
}

/// A ClientHello handshake message (header included) with `extensions`.
fn hello(extensions: &[Vec<u8>]) -> Vec<u8> {
    let mut body = vec![3, 3];
    body.extend([0x5a; 32]);
    body.push(32);
    body.extend([0x11; 32]);
    body.extend(vec16(&[0x13, 0x01, 0x13, 0x02]));
    body.extend([1, 0]);
    body.extend(vec16(&extensions.concat()));
    let mut message = vec![HANDSHAKE_CLIENT_HELLO];
    message.extend(&(body.len() as u32).to_be_bytes()[1..]);
    message.extend(body);
    message
}

fn records(message: &[u8], fragment: usize) -> Vec<u8> {
    let mut out = Vec::new();
    for chunk in message.chunks(fragment) {
        out.extend([CONTENT_HANDSHAKE, 3, 1]);
        out.extend(vec16(chunk));
    }
    out
}

fn typical(name: &str) -> Vec<u8> {
    hello(&[
        extension(0x000a, &vec16(&[0x00, 0x1d])),
        sni_extension(&[(0, name)]),
        extension(0x002b, &[2, 3, 4]),
    ])
}

#[test]
fn reads_the_server_name() {
    let stream = records(&typical("API.Example.com"), 16_384);
    assert_eq!(
        client_hello_sni(&stream),
        Ok(Some("api.example.com".into()))
    );
}

#[test]
fn fragmented_records_and_partial_streams() {
    let stream = records(&typical("www.example.org"), 50);
    assert_eq!(
        client_hello_sni(&stream),
        Ok(Some("www.example.org".into()))
    );
    for cut in 0..stream.len() {
        assert_eq!(
            client_hello_sni(&stream[..cut]),
            Err(TlsError::Incomplete),
            "cut {cut}"
        );
    }
}

#[test]
fn no_extension_means_no_name() {
    let stream = records(&hello(&[extension(0x002b, &[2, 3, 4])]), 16_384);
    assert_eq!(client_hello_sni(&stream), Ok(None));
}

#[test]
fn refusals() {
    let http = b"GET / HTTP/1.1\r\n\r\n";
    assert_eq!(client_hello_sni(http), Err(TlsError::NotHandshake));
    let mut server_hello = typical("a.test");
    server_hello[0] = 2;
    assert_eq!(
        client_hello_sni(&records(&server_hello, 16_384)),
        Err(TlsError::NotClientHello { msg_type: 2 })
    );
    let twice = hello(&[
        sni_extension(&[(0, "a.test")]),
        sni_extension(&[(0, "b.test")]),
    ]);
    assert_eq!(
        client_hello_sni(&records(&twice, 16_384)),
        Err(TlsError::DuplicateExtension { extension: 0 })
    );
    let two_names = hello(&[sni_extension(&[(0, "a.test"), (0, "b.test")])]);
    assert_eq!(
        client_hello_sni(&records(&two_names, 16_384)),
        Err(TlsError::Malformed)
    );
    for bad in ["a.test.", "a..test", "a test", "caf\u{e9}.test", ""] {
        let msg = hello(&[sni_extension(&[(0, bad)])]);
        assert_eq!(
            client_hello_sni(&records(&msg, 16_384)),
            Err(TlsError::InvalidServerName),
            "{bad:?}"
        );
    }
    let huge = [
        CONTENT_HANDSHAKE,
        3,
        1,
        0,
        4,
        HANDSHAKE_CLIENT_HELLO,
        0xff,
        0xff,
        0xff,
    ];
    assert!(matches!(
        client_hello_sni(&huge),
        Err(TlsError::TooLarge { .. })
    ));
}

#[test]
fn sni_patterns() {
    let rule = |p: Option<&str>| TlsProtocol {
        sni: p.map(Into::into),
    };
    assert!(matches(&rule(None), None));
    assert!(matches(&rule(Some("")), Some("x.test")));
    assert!(matches(
        &rule(Some("*.Example.com")),
        Some("api.example.com")
    ));
    assert!(!matches(&rule(Some("*.example.com")), Some("example.com")));
    assert!(matches(&rule(Some("example.com")), Some("EXAMPLE.com")));
    assert!(!matches(&rule(Some("example.com")), None));
}

proptest! {
    #[test]
    fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..600)) {
        let _ = client_hello_sni(&bytes);
    }

    #[test]
    fn mutated_hellos_never_panic(
        flips in proptest::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..6),
        fragment in 1usize..300,
    ) {
        let mut stream = records(&typical("www.example.org"), fragment);
        for (at, value) in flips {
            let i = at.index(stream.len());
            stream[i] ^= value;
        }
        let _ = client_hello_sni(&stream);
    }
}
