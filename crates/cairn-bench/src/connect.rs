//! `cairn bench connect`: what opening a session costs — TCP connect,
//! handshake, a PING and close — without a login (a trusted local
//! connection), with a SCRAM-SHA-256 login (the client derives its key with
//! the server's default of 32,768 PBKDF2 rounds), and with the login inside
//! TLS. Reported as microseconds per connection and as ratios to the plain
//! connection measured in the same run (the machine is shared and noisy).
//! The median of `--reps` repetitions of `--connects` connections each.

use std::io;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;
use cairn_net::message::{Fault, Hello};
use cairn_net::rpc::{Client, ClientOptions, Handler, Login, Replier, Request};
use cairn_net::scram::{Decoy, Verifier};
use cairn_net::transport::{Address, ClientTls, Listener, ServerTls, TlsRoots};

/// What `cairn bench connect` was asked for.
#[derive(clap::Args, Debug, Clone)]
pub struct ConnectArgs {
    /// Connections per measurement.
    #[arg(long, default_value_t = 200)]
    pub connects: usize,
    /// Repetitions of each measurement (the median is reported).
    #[arg(long, default_value_t = 3)]
    pub reps: usize,
    /// Also write the figures as JSON to this file (`cairn bench report`
    /// renders it).
    #[arg(long)]
    pub json: Option<PathBuf>,
}

/// PBKDF2 rounds of the verifier: the server's default for new users
/// (`cairn_server::users::ITERATIONS_DEFAULT`).
const ITERATIONS: u32 = 32_768;
const USER: &str = "bench";
const PASSWORD: &str = "bench-password";

struct ConnectHandler {
    verifier: Verifier,
    decoy: Decoy,
}

impl Handler for ConnectHandler {
    type Session = ();

    fn open(&self, _hello: &Hello, _peer: &str, _user: Option<&str>) -> Result<(), Fault> {
        Ok(())
    }

    fn credentials(&self, user: &str) -> Option<(Option<Verifier>, Decoy)> {
        Some(((user == USER).then(|| self.verifier.clone()), self.decoy.clone()))
    }

    async fn handle(&self, _session: &(), _request: Request, _reply: &Replier) -> Result<Bytes, Fault> {
        Ok(Bytes::new())
    }
}

/// A CA and a server certificate for 127.0.0.1 in `dir`: (ca, chain, key).
fn pki(dir: &std::path::Path) -> io::Result<(PathBuf, PathBuf, PathBuf)> {
    use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair, KeyUsagePurpose};
    let e = |e: rcgen::Error| io::Error::other(e.to_string());
    let ca_key = KeyPair::generate().map_err(e)?;
    let mut ca_params = CertificateParams::new(Vec::<String>::new()).map_err(e)?;
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca_params.distinguished_name.push(DnType::CommonName, "cairn bench CA");
    ca_params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
    let ca_cert = ca_params.self_signed(&ca_key).map_err(e)?;
    let issuer = Issuer::new(ca_params, ca_key);
    let key = KeyPair::generate().map_err(e)?;
    let cert = CertificateParams::new(vec!["127.0.0.1".to_string()])
        .map_err(e)?
        .signed_by(&key, &issuer)
        .map_err(e)?;
    let (ca, chain, k) = (dir.join("ca.pem"), dir.join("server.pem"), dir.join("server.key"));
    std::fs::write(&ca, ca_cert.pem())?;
    std::fs::write(&chain, format!("{}{}", cert.pem(), ca_cert.pem()))?;
    std::fs::write(&k, key.serialize_pem())?;
    Ok((ca, chain, k))
}

/// Microseconds per connection (connect, handshake, PING, close) over `n`.
fn measure(addr: &Address, opts: &ClientOptions, n: usize) -> io::Result<f64> {
    let start = Instant::now();
    for _ in 0..n {
        let c = Client::connect(addr, opts).map_err(|e| io::Error::other(e.to_string()))?;
        c.ping().map_err(|e| io::Error::other(e.to_string()))?;
    }
    Ok(start.elapsed().as_secs_f64() * 1e6 / n as f64)
}

/// Runs the measurement and prints the table.
pub fn cli_main(args: &ConnectArgs) -> io::Result<()> {
    let dir = std::env::temp_dir().join(format!("cairn-bench-connect-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let (ca, chain, key) = pki(&dir)?;
    let verifier = Verifier::generate(PASSWORD, ITERATIONS).map_err(|e| io::Error::other(e.to_string()))?;
    let decoy = Decoy::generate(ITERATIONS).map_err(|e| io::Error::other(e.to_string()))?;
    let tls = ServerTls::from_pem_files(&chain, &key).map_err(|e| io::Error::other(e.to_string()))?;
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    let handler = Arc::new(ConnectHandler { verifier, decoy });
    let (plain, secure) = rt.block_on(async {
        let any = Address::Tcp("127.0.0.1:0".parse().expect("an address"));
        let plain = Listener::bind(&any).await?;
        let secure = Listener::bind(&any)
            .await?
            .with_tls(tls)
            .map_err(|e| io::Error::other(e.to_string()))?;
        Ok::<_, io::Error>((plain, secure))
    })?;
    let (plain_addr, secure_addr) = (plain.local_addr()?, secure.local_addr()?);
    let limits = cairn_net::rpc::Limits {
        login_failures_burst: 1_000_000,
        ..cairn_net::rpc::Limits::default()
    };
    rt.spawn(cairn_net::rpc::run(
        plain,
        std::future::pending(),
        handler.clone(),
        limits.clone(),
    ));
    rt.spawn(cairn_net::rpc::run(secure, std::future::pending(), handler, limits));
    let login = Some(Login {
        user: USER.into(),
        password: PASSWORD.into(),
    });
    let configs: [(&str, &Address, ClientOptions); 3] = [
        ("plain, no login", &plain_addr, ClientOptions::default()),
        (
            "SCRAM-SHA-256 login",
            &plain_addr,
            ClientOptions {
                login: login.clone(),
                ..ClientOptions::default()
            },
        ),
        (
            "TLS + SCRAM-SHA-256 login",
            &secure_addr,
            ClientOptions {
                login,
                tls: Some(ClientTls {
                    roots: TlsRoots::CaFile(ca),
                    server_name: None,
                }),
                ..ClientOptions::default()
            },
        ),
    ];
    println!(
        "connect + handshake + PING + close, {} connections, median of {}:",
        args.connects, args.reps
    );
    let mut base = None;
    let mut figures = Vec::new();
    for (name, addr, opts) in &configs {
        let mut runs: Vec<f64> = (0..args.reps.max(1))
            .map(|_| measure(addr, opts, args.connects.max(1)))
            .collect::<io::Result<_>>()?;
        runs.sort_by(f64::total_cmp);
        let us = runs[runs.len() / 2];
        let ratio = us / *base.get_or_insert(us);
        println!("  {name:<28} {us:>9.1} µs/connection   {ratio:>6.2}× plain");
        figures.push((*name, us, ratio));
    }
    let _ = std::fs::remove_dir_all(&dir);
    if let Some(path) = &args.json {
        let text = serde_json::to_string_pretty(&to_json(args, &figures)).map_err(io::Error::other)?;
        std::fs::write(path, text + "\n").map_err(|e| io::Error::other(format!("{}: {e}", path.display())))?;
    }
    Ok(())
}

/// The `--json` document: the run's parameters and, per kind of session,
/// the median µs per connection and its ratio to the plain connection.
pub fn to_json(args: &ConnectArgs, figures: &[(&str, f64, f64)]) -> serde_json::Value {
    let m = crate::commit::machine();
    serde_json::json!({
        "benchmark": "connect",
        "machine": { "cores": m.cores, "memory_bytes": m.memory_bytes },
        "config": { "connects": args.connects, "reps": args.reps, "pbkdf2_rounds": ITERATIONS },
        "results": figures.iter().map(|(session, us, ratio)| serde_json::json!({
            "session": session,
            "us_per_connection": us,
            "ratio_to_plain": ratio,
        })).collect::<Vec<_>>(),
    })
}
