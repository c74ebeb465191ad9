//! A TLS server on 127.0.0.1 in front of a plain one (the scripted model
//! server), its certificate for 127.0.0.1 signed by a test authority made
//! for it: the upstream a model relay reaches over TLS, as it would the
//! real service. Each connection's bytes are passed on as they come, both
//! ways, so a streamed answer stays streamed.

#![allow(dead_code)]

use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

/// The TLS front: listening from `start` until dropped.
pub struct Tls {
    port: u16,
    /// The test authority's certificate, PEM: what the node is told to trust.
    pub authority: String,
    stop: Arc<AtomicBool>,
}

impl Tls {
    /// Starts a TLS server on 127.0.0.1 passing each connection on to the
    /// plain server on `backend`.
    pub fn front(backend: u16) -> Tls {
        let ca_key = rcgen::KeyPair::generate().unwrap();
        let mut ca = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        ca.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        ca.distinguished_name
            .push(rcgen::DnType::CommonName, "OCX test authority");
        ca.key_usages = vec![
            rcgen::KeyUsagePurpose::KeyCertSign,
            rcgen::KeyUsagePurpose::DigitalSignature,
        ];
        let ca = rcgen::CertifiedIssuer::self_signed(ca, ca_key).unwrap();
        let key = rcgen::KeyPair::generate().unwrap();
        let params =
            rcgen::CertificateParams::new(vec!["127.0.0.1".to_string(), "localhost".to_string()])
                .unwrap();
        let cert = params.signed_by(&key, &ca).unwrap();
        let config = rustls::ServerConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(
            vec![cert.der().clone(), CertificateDer::from(ca.der().to_vec())],
            PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key.serialize_der())),
        )
        .unwrap();
        let config = Arc::new(config);
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let stop = Arc::new(AtomicBool::new(false));
        let s = stop.clone();
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                if s.load(Ordering::SeqCst) {
                    break;
                }
                let Ok(stream) = stream else { continue };
                let config = config.clone();
                std::thread::spawn(move || pass_on(stream, config, backend));
            }
        });
        Tls {
            port,
            authority: ca.pem(),
            stop,
        }
    }

    /// `https://127.0.0.1:PORT`.
    pub fn url(&self) -> String {
        format!("https://127.0.0.1:{}", self.port)
    }

    /// Its port.
    pub fn port(&self) -> u16 {
        self.port
    }
}

impl Drop for Tls {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        let _ = TcpStream::connect(("127.0.0.1", self.port));
    }
}

/// The port of a `http://127.0.0.1:PORT` URL.
pub fn port_of(url: &str) -> u16 {
    url.rsplit(':').next().unwrap().parse().unwrap()
}

/// One connection: TLS from the client, plain to `backend`, each way in a
/// thread of its own sharing the TLS state (never held while waiting).
fn pass_on(client: TcpStream, config: Arc<rustls::ServerConfig>, backend: u16) {
    let _ = client.set_nodelay(true);
    let Ok(conn) = rustls::ServerConnection::new(config) else {
        return;
    };
    let Ok(plain) = TcpStream::connect(("127.0.0.1", backend)) else {
        return;
    };
    let _ = plain.set_nodelay(true);
    let conn = Arc::new(Mutex::new(conn));
    let up = {
        let (conn, mut raw, mut tls_out, mut plain_out) = (
            conn.clone(),
            client.try_clone().unwrap(),
            client.try_clone().unwrap(),
            plain.try_clone().unwrap(),
        );
        std::thread::spawn(move || {
            let mut buf = vec![0u8; 16 << 10];
            loop {
                let n = match raw.read(&mut buf) {
                    Ok(0) | Err(_) => break,
                    Ok(n) => n,
                };
                let mut bytes = Vec::new();
                {
                    let mut c = conn.lock().unwrap();
                    let mut rd = &buf[..n];
                    while !rd.is_empty() {
                        if c.read_tls(&mut rd).is_err() {
                            return;
                        }
                        if c.process_new_packets().is_err() {
                            let _ = c.write_tls(&mut tls_out);
                            return;
                        }
                    }
                    let _ = c.reader().read_to_end(&mut bytes);
                    while c.wants_write() {
                        if c.write_tls(&mut tls_out).is_err() {
                            return;
                        }
                    }
                }
                if plain_out.write_all(&bytes).is_err() {
                    break;
                }
            }
            let _ = plain_out.shutdown(Shutdown::Write);
        })
    };
    let mut plain_in = plain;
    let mut tls_out = client.try_clone().unwrap();
    let mut buf = vec![0u8; 16 << 10];
    loop {
        let n = match plain_in.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        let mut c = conn.lock().unwrap();
        if c.writer().write_all(&buf[..n]).is_err() {
            break;
        }
        while c.wants_write() {
            if c.write_tls(&mut tls_out).is_err() {
                break;
            }
        }
    }
    {
        let mut c = conn.lock().unwrap();
        c.send_close_notify();
        while c.wants_write() {
            if c.write_tls(&mut tls_out).is_err() {
                break;
            }
        }
    }
    let _ = client.shutdown(Shutdown::Both);
    let _ = up.join();
}
