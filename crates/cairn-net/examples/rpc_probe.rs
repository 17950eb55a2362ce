//! Where does a synchronous call's time go? Raw client against Cairn's server (PING, and a
//! handler request), Cairn's client, and the raw floor, in one process.
use std::io::{Read, Write};
use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;
use cairn_net::frame::{self, Flags, HEADER_SIZE};
use cairn_net::message::{Fault, Hello, Message};
use cairn_net::rpc::{self, Client, ClientOptions, Handler, Limits, Replier, Request};
use cairn_net::transport::{Address, Listener};
use cairn_net::{Kind, RequestId};

struct H;
impl Handler for H {
    type Session = ();
    fn open(&self, _: &Hello, _: &str) -> Result<(), Fault> {
        Ok(())
    }
    async fn handle(&self, _: &(), _: Request, _: &Replier) -> Result<Bytes, Fault> {
        Ok(Bytes::new())
    }
}

fn main() {
    let n = 50_000;
    let dir = std::env::temp_dir().join(format!("probe-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let addr = Address::Unix(dir.join("c.sock"));
    let a2 = addr.clone();
    let workers: usize = std::env::var("W").ok().and_then(|s| s.parse().ok()).unwrap_or(2);
    std::thread::spawn(move || {
        let rt = if workers == 0 {
            tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap()
        } else {
            tokio::runtime::Builder::new_multi_thread().worker_threads(workers).enable_all().build().unwrap()
        };
        rt.block_on(async move {
            let l = Listener::bind(&a2).await.unwrap();
            rpc::run(l, std::future::pending(), Arc::new(H), Limits::default()).await;
        });
    });
    std::thread::sleep(std::time::Duration::from_millis(100));
    let raw_path = dir.join("raw.sock");
    let l = std::os::unix::net::UnixListener::bind(&raw_path).unwrap();
    std::thread::spawn(move || {
        for s in l.incoming().flatten() {
            std::thread::spawn(move || {
                let mut s = s;
                let mut b = [0u8; 32];
                while s.read_exact(&mut b).is_ok() {
                    s.write_all(&b).unwrap();
                }
            });
        }
    });
    for round in 0..3 {
        // raw floor
        let mut s = std::os::unix::net::UnixStream::connect(&raw_path).unwrap();
        let ping = frame::encode_header(Kind::PING, Flags::NONE, RequestId(1), &[]);
        let mut b = [0u8; 32];
        let t = Instant::now();
        for _ in 0..n {
            s.write_all(&ping).unwrap();
            s.read_exact(&mut b).unwrap();
        }
        let raw = t.elapsed().as_secs_f64() * 1e6 / n as f64;
        // raw client, cairn server
        let Address::Unix(p) = &addr else { unreachable!() };
        let mut s = std::os::unix::net::UnixStream::connect(p).unwrap();
        let mut hello = Vec::new();
        Message::Hello(Hello { architecture: cairn_net::Architecture::RPC, token: Bytes::new(), client_name: "x".into() }).encode(&mut hello);
        s.write_all(&hello).unwrap();
        let mut h = [0u8; 32];
        s.read_exact(&mut h).unwrap();
        let hdr = frame::FrameHeader::decode(&h).unwrap();
        let mut body = vec![0; hdr.body_len as usize];
        s.read_exact(&mut body).unwrap();
        let mut time = |kind: Kind| {
            let req = frame::encode_header(kind, Flags::NONE, RequestId(1), &[]);
            let t = Instant::now();
            for _ in 0..n {
                s.write_all(&req).unwrap();
                s.read_exact(&mut b[..HEADER_SIZE]).unwrap();
            }
            t.elapsed().as_secs_f64() * 1e6 / n as f64
        };
        let srv_ping = time(Kind::PING);
        let srv_req = time(Kind(0x100));
        // cairn client, cairn server
        let c = Client::connect(&addr, &ClientOptions::default()).unwrap();
        let t = Instant::now();
        for _ in 0..n {
            c.call(Kind(0x100), Bytes::new()).unwrap();
        }
        let full = t.elapsed().as_secs_f64() * 1e6 / n as f64;
        println!("round {round}: raw {raw:.2}  rawclient+server ping {srv_ping:.2} req {srv_req:.2}  client+server {full:.2}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}
