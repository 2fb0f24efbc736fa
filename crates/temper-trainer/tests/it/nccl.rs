//! NCCL without a GPU: the library opened at run time (or refused with what to install), and
//! the TCP rendezvous that hands rank 0's unique id to the other ranks.
#![allow(clippy::print_stderr, reason = "a skip belongs in the log")]

use std::net::TcpListener;
use std::path::Path;
use std::time::{Duration, Instant};

use temper_trainer::collective::Placement;
use temper_trainer::nccl::{self, Library, NcclError, UNIQUE_ID_BYTES, UniqueId};

fn placement(rank: usize, world: usize, port: u16) -> Placement {
    let vars = [
        ("RANK", rank.to_string()),
        ("WORLD_SIZE", world.to_string()),
        ("MASTER_ADDR", "127.0.0.1".to_owned()),
        ("MASTER_PORT", port.to_string()),
    ];
    Placement::from_vars(|k| vars.iter().find(|(n, _)| *n == k).map(|(_, v)| v.clone())).unwrap()
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

fn id(byte: u8) -> UniqueId {
    let mut internal = [0u8; UNIQUE_ID_BYTES];
    for (i, b) in internal.iter_mut().enumerate() {
        *b = byte.wrapping_add(i as u8);
    }
    UniqueId { internal }
}

#[test]
fn every_rank_gets_rank_zeros_id() {
    let port = free_port();
    let world = 4;
    // The other ranks start first and wait for rank 0 to listen.
    let peers: Vec<_> = (1..world)
        .map(|r| {
            std::thread::spawn(move || {
                nccl::share_unique_id(
                    &placement(r, world, port),
                    || panic!("only rank 0 makes the id"),
                    Duration::from_secs(20),
                )
            })
        })
        .collect();
    std::thread::sleep(Duration::from_millis(200));
    let made =
        nccl::share_unique_id(&placement(0, world, port), || Ok(id(7)), Duration::from_secs(20))
            .unwrap();
    assert_eq!(made, id(7));
    for p in peers {
        assert_eq!(p.join().unwrap().unwrap(), id(7));
    }
}

#[test]
fn the_rendezvous_refuses_strangers_twins_and_waits_no_longer_than_told() {
    // No MASTER_ADDR: said so, before anything waits.
    let alone = Placement::from_vars(|k| match k {
        "OMPI_COMM_WORLD_RANK" => Some("1".into()),
        "OMPI_COMM_WORLD_SIZE" => Some("2".into()),
        _ => None,
    })
    .unwrap();
    let e = nccl::share_unique_id(&alone, || Ok(id(1)), Duration::from_secs(1)).unwrap_err();
    assert!(e.to_string().contains("set both (temper rl sets them)"), "{e}");

    // A rank whose rank 0 never comes gives up at its deadline.
    let port = free_port();
    let since = Instant::now();
    let e = nccl::share_unique_id(&placement(1, 2, port), || Ok(id(1)), Duration::from_millis(600))
        .unwrap_err();
    assert!(
        e.to_string().contains("rank 1 from 127.0.0.1") && e.to_string().contains("timed out"),
        "{e}"
    );
    assert!(since.elapsed() < Duration::from_secs(5), "{:?}", since.elapsed());

    // Rank 0 waits for missing ranks no longer than told, and names them.
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let e = nccl::serve_id(&listener, &id(2), 3, Instant::now() + Duration::from_millis(300))
        .unwrap_err();
    assert_eq!(e.to_string(), "NCCL rendezvous: rank 0 waited past the timeout for rank(s) 1, 2");

    // A connection that is not a rank, then one that says the wrong world size.
    use std::io::Write;
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let server = std::thread::spawn(move || {
        nccl::serve_id(&listener, &id(3), 2, Instant::now() + Duration::from_secs(20))
    });
    let mut stranger = std::net::TcpStream::connect(addr).unwrap();
    stranger.write_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
    let mut liar = std::net::TcpStream::connect(addr).unwrap();
    let mut hello = b"tmpNCCL1".to_vec();
    hello.extend(1u64.to_le_bytes());
    hello.extend(5u64.to_le_bytes());
    liar.write_all(&hello).unwrap();
    let e = server.join().unwrap().unwrap_err().to_string();
    assert!(e.contains("rank 1") && e.contains("was told the world has 5 ranks, rank 0 2"), "{e}");

    // The same rank twice.
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let server = std::thread::spawn(move || {
        nccl::serve_id(&listener, &id(4), 3, Instant::now() + Duration::from_secs(20))
    });
    for _ in 0..2 {
        let got =
            nccl::share_unique_id(&placement(1, 3, port), || Ok(id(0)), Duration::from_secs(20));
        if got.is_err() {
            break;
        }
    }
    let e = server.join().unwrap().unwrap_err().to_string();
    assert!(e.contains("rank 1 asked twice"), "{e}");
}

/// `TEMPER_TEST_NCCL_LIB`: a libnccl.so.2 to open (scripts/test-deps fetches PyPI's
/// nvidia-nccl-cu13; NCCL's version and unique id need no GPU). With
/// `TEMPER_TEST_REQUIRE_NCCL=1`, its absence fails the test.
#[test]
fn nccl_opens_at_run_time_or_says_what_to_install() {
    let e = Library::load_from(Some(Path::new("/nonexistent/libnccl.so.2"))).unwrap_err();
    assert!(matches!(e, NcclError::Load { .. }));
    let text = e.to_string();
    assert!(
        text.starts_with("cannot load NCCL (tried /nonexistent/libnccl.so.2):")
            && text.ends_with("install NCCL (Debian: libnccl2; PyPI: nvidia-nccl-cu13) or set TEMPER_NCCL_LIB to its libnccl.so.2"),
        "{text}"
    );
    let Some(path) = std::env::var_os("TEMPER_TEST_NCCL_LIB") else {
        assert!(
            std::env::var("TEMPER_TEST_REQUIRE_NCCL").as_deref() != Ok("1"),
            "TEMPER_TEST_REQUIRE_NCCL is set but TEMPER_TEST_NCCL_LIB is not"
        );
        eprintln!("skipped: TEMPER_TEST_NCCL_LIB is not set");
        return;
    };
    // A folder holding libnccl.so.2 works as well as the file.
    let lib = Library::load_from(Some(Path::new(&path))).unwrap();
    let folder = Path::new(&path).parent().unwrap();
    assert_eq!(Library::load_from(Some(folder)).unwrap().path(), lib.path());
    let (major, minor, _patch) = lib.version().unwrap();
    assert!(major == 2 && minor >= 18, "NCCL {major}.{minor}");
    let (a, b) = (lib.unique_id().unwrap(), lib.unique_id().unwrap());
    assert_ne!(a, b, "two ids");
    assert_ne!(a.internal, [0u8; UNIQUE_ID_BYTES]);
}
