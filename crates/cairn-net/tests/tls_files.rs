//! Certificate and key files that cannot be used are refused before anything is served or sent,
//! each error naming the file and what is wrong with it: missing, not PEM, no certificate, no
//! private key (or an encrypted one), a key that is not the certificate's; and on the client, a
//! CA file that is missing or holds no certificate.

mod common;

use std::path::Path;

use cairn_net::rpc::{Client, ClientOptions, Limits};
use cairn_net::transport::{ServerTls, TlsError, TlsRoots};
use cairn_net::Error;
use common::{Pki, Server, Transport};

fn refused(cert: &Path, key: &Path) -> TlsError {
    match ServerTls::from_pem_files(cert, key) {
        Err(e) => {
            eprintln!("refused: {e}");
            e
        }
        Ok(_) => panic!("{} and {} were accepted", cert.display(), key.display()),
    }
}

fn names(e: &TlsError, file: &Path) {
    let text = e.to_string();
    assert!(
        text.contains(&file.display().to_string()),
        "{text:?} does not name {}",
        file.display()
    );
}

#[test]
fn good_files_are_accepted() {
    let pki = Pki::new("cairn test CA");
    ServerTls::from_pem_files(&pki.cert, &pki.key).unwrap();
}

#[test]
fn a_missing_file_is_named() {
    let pki = Pki::new("cairn test CA");
    let missing = pki.dir.join("no-such.pem");
    let e = refused(&missing, &pki.key);
    assert!(matches!(e, TlsError::Read { .. }), "{e:?}");
    names(&e, &missing);
    let e = refused(&pki.cert, &missing);
    assert!(matches!(e, TlsError::Read { .. }), "{e:?}");
    names(&e, &missing);
}

#[test]
fn a_file_without_a_certificate_or_a_key_is_named() {
    let pki = Pki::new("cairn test CA");
    // The two files swapped: the key file as the chain, the chain as the key.
    let e = refused(&pki.key, &pki.key);
    assert!(matches!(e, TlsError::NoCertificate { .. }), "{e:?}");
    names(&e, &pki.key);
    let e = refused(&pki.cert, &pki.cert);
    assert!(matches!(e, TlsError::NoPrivateKey { encrypted: false, .. }), "{e:?}");
    names(&e, &pki.cert);
    // An encrypted key is named as such.
    let encrypted = pki.dir.join("encrypted.key");
    std::fs::write(
        &encrypted,
        "-----BEGIN ENCRYPTED PRIVATE KEY-----\nMIIBvTBXBgkqhkiG9w0BBQ0wSjApBgkqhkiG9w0BBQwwHAQI\n-----END ENCRYPTED PRIVATE KEY-----\n",
    )
    .unwrap();
    let e = refused(&pki.cert, &encrypted);
    assert!(matches!(e, TlsError::NoPrivateKey { encrypted: true, .. }), "{e:?}");
    assert!(e.to_string().contains("encrypted"), "{e}");
    // An empty file and a file of something else.
    let empty = pki.dir.join("empty.pem");
    std::fs::write(&empty, "").unwrap();
    assert!(matches!(refused(&empty, &pki.key), TlsError::NoCertificate { .. }));
    let text = pki.dir.join("notes.txt");
    std::fs::write(&text, "just some notes\n").unwrap();
    assert!(matches!(refused(&pki.cert, &text), TlsError::NoPrivateKey { .. }));
}

#[test]
fn a_damaged_pem_file_is_named() {
    let pki = Pki::new("cairn test CA");
    let damaged = pki.dir.join("damaged.pem");
    std::fs::write(
        &damaged,
        "-----BEGIN CERTIFICATE-----\n!!!! not base64 !!!!\n-----END CERTIFICATE-----\n",
    )
    .unwrap();
    let e = refused(&damaged, &pki.key);
    assert!(matches!(e, TlsError::Pem { .. }), "{e:?}");
    names(&e, &damaged);
    // PEM that decodes, but to no certificate.
    let garbage = pki.dir.join("garbage.pem");
    std::fs::write(
        &garbage,
        "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n",
    )
    .unwrap();
    let e = refused(&garbage, &pki.key);
    assert!(matches!(e, TlsError::BadCertificate { .. }), "{e:?}");
    names(&e, &garbage);
}

#[test]
fn a_key_that_is_not_the_certificates_is_named() {
    let pki = Pki::new("cairn test CA");
    let other = Pki::new("cairn test CA");
    let e = refused(&pki.cert, &other.key);
    assert!(matches!(e, TlsError::KeyMismatch { .. }), "{e:?}");
    names(&e, &pki.cert);
    names(&e, &other.key);
    assert!(e.to_string().contains("does not match"), "{e}");
}

#[test]
fn a_client_ca_file_that_cannot_be_used_is_named() {
    let server = Server::start(Transport::Tls, Limits::default());
    let dir = server.pki.as_ref().unwrap().dir.clone();
    let missing = dir.join("missing-ca.pem");
    let empty = dir.join("empty-ca.pem");
    std::fs::write(&empty, "").unwrap();
    for (file, what) in [(&missing, "cannot read"), (&empty, "holds no certificate")] {
        let mut opts: ClientOptions = server.options();
        opts.tls.as_mut().unwrap().roots = TlsRoots::CaFile(file.clone());
        match Client::connect(&server.addr, &opts) {
            Err(Error::Tls(why)) => {
                eprintln!("refused: {why}");
                assert!(why.contains(&file.display().to_string()), "{why}");
                assert!(why.contains(what), "{why}");
            }
            other => panic!("expected a TLS error, got {other:?}"),
        }
    }
    assert_eq!(server.handler.opened.load(std::sync::atomic::Ordering::SeqCst), 0);
}
