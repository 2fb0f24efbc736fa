//! NCCL, loaded when a run asks for it: the GPU collective for trainer ranks whose weights are on
//! CUDA devices.
//!
//! Nothing links against NCCL: [`Library::load`] opens `libnccl.so.2` at run time (the file
//! `TEMPER_NCCL_LIB` names, else the dynamic loader's search, which finds Debian's `libnccl2` or a
//! folder on `LD_LIBRARY_PATH` such as PyPI's `nvidia-nccl-cu13`), so a build with the `nccl`
//! feature starts, and runs on the CPU, on machines without it.
//!
//! The ranks meet as torchrun's do: rank 0 makes NCCL's unique id and hands it, over TCP at
//! `MASTER_ADDR:MASTER_PORT`, to each other rank ([`share_unique_id`]); then every rank joins the
//! communicator. [`Nccl`] (cargo feature `nccl`) is the [`crate::Collective`] over it: tensors on
//! the GPU are summed on the GPU (packed into one buffer, all-reduced on the device's stream,
//! unpacked), with no copy through the host.
//!
//! NCCL is a C library: this module's calls into it are `unsafe`, each with the contract nccl.h
//! gives it; nothing else in the trainer is.
#![expect(unsafe_code, reason = "NCCL is a C library opened at run time and called through FFI")]

use std::ffi::{CStr, c_char, c_int, c_void};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream, ToSocketAddrs};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::collective::Placement;

/// Bytes of NCCL's unique id (`NCCL_UNIQUE_ID_BYTES`).
pub const UNIQUE_ID_BYTES: usize = 128;

/// The variable naming the NCCL library file (or the folder holding `libnccl.so.2`).
pub const LIB_VAR: &str = "TEMPER_NCCL_LIB";

/// `ncclUniqueId`.
#[repr(C)]
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct UniqueId {
    /// The id's bytes, opaque.
    pub internal: [u8; UNIQUE_ID_BYTES],
}

impl std::fmt::Debug for UniqueId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Opaque bytes; the first few tell two ids apart in a log.
        write!(f, "UniqueId({:02x?}…)", &self.internal[..8])
    }
}

/// Why NCCL could not be used.
#[derive(Debug, thiserror::Error)]
pub enum NcclError {
    /// No NCCL library could be opened.
    #[error(
        "cannot load NCCL (tried {}): {why}; install NCCL (Debian: libnccl2; PyPI: nvidia-nccl-cu13) or set {LIB_VAR} to its libnccl.so.2",
        tried.join(", ")
    )]
    Load {
        /// The names and paths tried, in order.
        tried: Vec<String>,
        /// The loader's last error.
        why: String,
    },
    /// An NCCL call failed.
    #[error("{call} failed: {message} (NCCL error {code})")]
    Call {
        /// The function.
        call: &'static str,
        /// Its `ncclResult_t`.
        code: i32,
        /// `ncclGetErrorString`'s text.
        message: String,
    },
    /// The ranks could not exchange the unique id.
    #[error("NCCL rendezvous: {0}")]
    Rendezvous(String),
    /// A tensor or device the collective cannot work with.
    #[error("NCCL: {0}")]
    Unsupported(String),
}

type Comm = *mut c_void;
type Stream = *mut c_void;

/// The functions temper calls, as NCCL 2.x declares them.
#[derive(Clone, Copy)]
struct Api {
    get_version: unsafe extern "C" fn(*mut c_int) -> c_int,
    get_unique_id: unsafe extern "C" fn(*mut UniqueId) -> c_int,
    error_string: unsafe extern "C" fn(c_int) -> *const c_char,
    #[cfg_attr(not(feature = "nccl"), allow(dead_code))]
    comm_init_rank: unsafe extern "C" fn(*mut Comm, c_int, UniqueId, c_int) -> c_int,
    #[cfg_attr(not(feature = "nccl"), allow(dead_code))]
    comm_destroy: unsafe extern "C" fn(Comm) -> c_int,
    #[cfg_attr(not(feature = "nccl"), allow(dead_code))]
    all_reduce: unsafe extern "C" fn(
        *const c_void,
        *mut c_void,
        usize,
        c_int,
        c_int,
        Comm,
        Stream,
    ) -> c_int,
    #[cfg_attr(not(feature = "nccl"), allow(dead_code))]
    reduce_scatter: unsafe extern "C" fn(
        *const c_void,
        *mut c_void,
        usize,
        c_int,
        c_int,
        Comm,
        Stream,
    ) -> c_int,
    #[cfg_attr(not(feature = "nccl"), allow(dead_code))]
    all_gather:
        unsafe extern "C" fn(*const c_void, *mut c_void, usize, c_int, Comm, Stream) -> c_int,
}

/// An opened NCCL library.
pub struct Library {
    api: Api,
    path: String,
    // Kept open for as long as the function pointers in `api` are used.
    _lib: libloading::Library,
}

impl std::fmt::Debug for Library {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Library").field("path", &self.path).finish_non_exhaustive()
    }
}

impl Library {
    /// Opens NCCL: the file or folder `TEMPER_NCCL_LIB` names, else `libnccl.so.2` and
    /// `libnccl.so` through the dynamic loader.
    pub fn load() -> Result<Library, NcclError> {
        Self::load_from(
            std::env::var_os(LIB_VAR).filter(|v| !v.is_empty()).as_deref().map(Path::new),
        )
    }

    /// Opens the NCCL library `path` names (a file, or a folder holding `libnccl.so.2`), or,
    /// without one, `libnccl.so.2` and `libnccl.so` through the dynamic loader.
    pub fn load_from(path: Option<&Path>) -> Result<Library, NcclError> {
        let candidates: Vec<PathBuf> = match path {
            Some(p) if p.is_dir() => vec![p.join("libnccl.so.2")],
            Some(p) => vec![p.to_owned()],
            None => ["libnccl.so.2", "libnccl.so"].map(PathBuf::from).to_vec(),
        };
        let mut why = String::new();
        for c in &candidates {
            match Self::open(c) {
                Ok(lib) => return Ok(lib),
                Err(e) => why = e,
            }
        }
        Err(NcclError::Load {
            tried: candidates.iter().map(|c| c.display().to_string()).collect(),
            why,
        })
    }

    fn open(path: &Path) -> Result<Library, String> {
        // SAFETY: loading NCCL runs its initialisers, which have no preconditions; every symbol
        // is read with the signature nccl.h declares for it.
        unsafe {
            let lib = libloading::Library::new(path).map_err(|e| e.to_string())?;
            macro_rules! sym {
                ($name:literal) => {
                    *lib.get(concat!($name, "\0").as_bytes()).map_err(|e| e.to_string())?
                };
            }
            let api = Api {
                get_version: sym!("ncclGetVersion"),
                get_unique_id: sym!("ncclGetUniqueId"),
                error_string: sym!("ncclGetErrorString"),
                comm_init_rank: sym!("ncclCommInitRank"),
                comm_destroy: sym!("ncclCommDestroy"),
                all_reduce: sym!("ncclAllReduce"),
                reduce_scatter: sym!("ncclReduceScatter"),
                all_gather: sym!("ncclAllGather"),
            };
            Ok(Library { api, path: path.display().to_string(), _lib: lib })
        }
    }

    /// The file it was opened as.
    pub fn path(&self) -> &str {
        &self.path
    }

    fn check(&self, call: &'static str, code: c_int) -> Result<(), NcclError> {
        if code == 0 {
            return Ok(());
        }
        // SAFETY: ncclGetErrorString returns a static C string for any code.
        let message = unsafe {
            let s = (self.api.error_string)(code);
            if s.is_null() {
                "unknown error".to_owned()
            } else {
                CStr::from_ptr(s).to_string_lossy().into_owned()
            }
        };
        Err(NcclError::Call { call, code, message })
    }

    /// NCCL's version, (major, minor, patch).
    pub fn version(&self) -> Result<(u32, u32, u32), NcclError> {
        let mut v: c_int = 0;
        // SAFETY: writes one int.
        self.check("ncclGetVersion", unsafe { (self.api.get_version)(&mut v) })?;
        let v = v.max(0) as u32;
        // NCCL_VERSION_CODE since 2.9: major·10000 + minor·100 + patch.
        Ok((v / 10000, v % 10000 / 100, v % 100))
    }

    /// A new unique id (rank 0 makes it; it needs no GPU).
    pub fn unique_id(&self) -> Result<UniqueId, NcclError> {
        let mut id = UniqueId { internal: [0; UNIQUE_ID_BYTES] };
        // SAFETY: writes one ncclUniqueId.
        self.check("ncclGetUniqueId", unsafe { (self.api.get_unique_id)(&mut id) })?;
        Ok(id)
    }
}

/// What a rank sends rank 0 to ask for the id: a tag, its rank and the world size it was told.
const HELLO: &[u8; 8] = b"tmpNCCL1";

/// Hands rank 0's unique id to every rank, over TCP at the placement's `MASTER_ADDR:MASTER_PORT`:
/// rank 0 listens there (on every interface) and answers each other rank once; the others
/// connect, retrying until rank 0 listens. Ranks that disagree on the world size, a rank asked
/// for twice, or a peer that is not a temper rank are refused; nothing waits past `timeout`.
pub fn share_unique_id(
    placement: &Placement,
    make: impl FnOnce() -> Result<UniqueId, NcclError>,
    timeout: Duration,
) -> Result<UniqueId, NcclError> {
    let bad = |m: String| NcclError::Rendezvous(m);
    let Some((host, port)) = &placement.master else {
        return Err(bad(format!(
            "{} ranks meet at MASTER_ADDR:MASTER_PORT (rank 0's node and a free port); set both (temper rl sets them)",
            placement.world_size
        )));
    };
    let deadline = Instant::now() + timeout;
    let world = placement.world_size;
    if placement.rank == 0 {
        let id = make()?;
        let listener = TcpListener::bind(("0.0.0.0", *port))
            .map_err(|e| bad(format!("rank 0 cannot listen on port {port}: {e}")))?;
        serve_id(&listener, &id, world, deadline)?;
        return Ok(id);
    }
    let addrs: Vec<SocketAddr> = (host.as_str(), *port)
        .to_socket_addrs()
        .map_err(|e| bad(format!("MASTER_ADDR {host}: {e}")))?
        .collect();
    fetch_id(&addrs, placement.rank, world, deadline)
        .map_err(|e| bad(format!("rank {} from {host}:{port}: {e}", placement.rank)))
}

fn remaining(deadline: Instant) -> Result<Duration, String> {
    deadline
        .checked_duration_since(Instant::now())
        .filter(|d| !d.is_zero())
        .ok_or_else(|| "timed out".to_owned())
}

/// Rank 0's side: answers ranks 1..world once each.
pub fn serve_id(
    listener: &TcpListener,
    id: &UniqueId,
    world: usize,
    deadline: Instant,
) -> Result<(), NcclError> {
    let bad = |m: String| NcclError::Rendezvous(m);
    listener.set_nonblocking(true).map_err(|e| bad(e.to_string()))?;
    let mut served = vec![false; world];
    served[0] = true;
    while served.iter().any(|s| !s) {
        let (mut conn, peer) = match listener.accept() {
            Ok(c) => c,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                if remaining(deadline).is_err() {
                    let missing: Vec<String> =
                        (0..world).filter(|&r| !served[r]).map(|r| r.to_string()).collect();
                    return Err(bad(format!(
                        "rank 0 waited past the timeout for rank(s) {}",
                        missing.join(", ")
                    )));
                }
                std::thread::sleep(Duration::from_millis(5));
                continue;
            }
            Err(e) => return Err(bad(format!("rank 0 cannot accept: {e}"))),
        };
        // A peer that says nothing (or too little) is dropped, not waited for.
        let hello = (|| -> std::io::Result<[u8; 24]> {
            conn.set_nonblocking(false)?;
            conn.set_read_timeout(Some(Duration::from_secs(5)))?;
            conn.set_write_timeout(Some(Duration::from_secs(5)))?;
            let mut buf = [0u8; 24];
            conn.read_exact(&mut buf)?;
            Ok(buf)
        })();
        let Ok(hello) = hello else { continue };
        if &hello[..8] != HELLO {
            tracing::warn!(%peer, "NCCL rendezvous: a connection that is not a temper rank");
            continue;
        }
        let rank = u64::from_le_bytes(hello[8..16].try_into().unwrap_or_default());
        let their_world = u64::from_le_bytes(hello[16..24].try_into().unwrap_or_default());
        if their_world != world as u64 {
            return Err(bad(format!(
                "rank {rank} (from {peer}) was told the world has {their_world} ranks, rank 0 {world}"
            )));
        }
        let Some(slot) = usize::try_from(rank).ok().filter(|&r| r < world) else {
            return Err(bad(format!("{peer} asked as rank {rank} of {world}")));
        };
        if served[slot] {
            return Err(bad(format!("rank {rank} asked twice (again from {peer})")));
        }
        conn.write_all(&id.internal).map_err(|e| bad(format!("rank {rank} ({peer}): {e}")))?;
        served[slot] = true;
    }
    Ok(())
}

/// A rank's side: asks rank 0 for the id.
fn fetch_id(
    addrs: &[SocketAddr],
    rank: usize,
    world: usize,
    deadline: Instant,
) -> Result<UniqueId, String> {
    let mut hello = [0u8; 24];
    hello[..8].copy_from_slice(HELLO);
    hello[8..16].copy_from_slice(&(rank as u64).to_le_bytes());
    hello[16..24].copy_from_slice(&(world as u64).to_le_bytes());
    let mut last = String::from("no address");
    loop {
        for addr in addrs {
            let wait = remaining(deadline)?;
            // Not listening yet: try again. Connected, rank 0 answers or the rendezvous fails.
            let mut conn = match TcpStream::connect_timeout(addr, wait.min(Duration::from_secs(5)))
            {
                Ok(c) => c,
                Err(e) => {
                    last = e.to_string();
                    continue;
                }
            };
            let answer = (|| -> std::io::Result<UniqueId> {
                conn.set_read_timeout(Some(remaining(deadline).map_err(std::io::Error::other)?))?;
                conn.write_all(&hello)?;
                let mut id = UniqueId { internal: [0; UNIQUE_ID_BYTES] };
                conn.read_exact(&mut id.internal)?;
                Ok(id)
            })();
            return answer.map_err(|e| format!("rank 0 did not answer: {e}"));
        }
        if remaining(deadline).is_err() {
            return Err(format!("timed out ({last})"));
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[cfg(feature = "nccl")]
pub use gpu::Nccl;

#[cfg(feature = "nccl")]
mod gpu {
    use std::sync::{Arc, Mutex};

    use candle_core::cuda_backend::{CudaDevice, CudaStorage};
    use candle_core::op::BackpropOp;
    use candle_core::{DType, Device, Storage, Tensor};
    use cudarc::driver::{CudaSlice, DevicePtr, DevicePtrMut};

    use super::{Comm, Library, NcclError, Stream};
    use crate::collective::{Blocks, Collective, Placement};

    const FLOAT32: i32 = 7;
    const FLOAT64: i32 = 8;
    const SUM: i32 = 0;

    struct Handle(Comm);
    // SAFETY: an NCCL communicator may be used from any thread, one call at a time (the Mutex).
    unsafe impl Send for Handle {}

    /// The ranks' NCCL communicator on one CUDA device each, as a [`Collective`]. Sums are
    /// NCCL's in f32 (tensors) or f64 (scalars); every rank gets the same bits.
    pub struct Nccl {
        lib: Arc<Library>,
        comm: Mutex<Handle>,
        device: CudaDevice,
        rank: usize,
        world: usize,
    }

    impl std::fmt::Debug for Nccl {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.debug_struct("Nccl")
                .field("rank", &self.rank)
                .field("world", &self.world)
                .field("library", &self.lib.path())
                .finish_non_exhaustive()
        }
    }

    fn err(e: impl std::fmt::Display) -> candle_core::Error {
        candle_core::Error::Msg(format!("NCCL: {e}"))
    }

    impl Nccl {
        /// Joins the ranks of `placement` on `device` (a CUDA device): rank 0's unique id is
        /// shared over TCP ([`super::share_unique_id`]), then `ncclCommInitRank`.
        pub fn init(
            lib: Arc<Library>,
            placement: &Placement,
            device: &Device,
            timeout: std::time::Duration,
        ) -> Result<Nccl, NcclError> {
            let Device::Cuda(cuda) = device else {
                return Err(NcclError::Unsupported(format!(
                    "the trainer's device is {device:?}; NCCL sums tensors on CUDA devices (use MPI on the CPU)"
                )));
            };
            let id = super::share_unique_id(placement, || lib.unique_id(), timeout)?;
            let stream = cuda.cuda_stream();
            stream
                .context()
                .bind_to_thread()
                .map_err(|e| NcclError::Unsupported(format!("cannot use the CUDA device: {e}")))?;
            let mut comm: Comm = std::ptr::null_mut();
            // SAFETY: `comm` receives the communicator; the id is the one every rank has.
            let code = unsafe {
                (lib.api.comm_init_rank)(
                    &mut comm,
                    placement.world_size as i32,
                    id,
                    placement.rank as i32,
                )
            };
            lib.check("ncclCommInitRank", code)?;
            Ok(Nccl {
                lib,
                comm: Mutex::new(Handle(comm)),
                device: cuda.clone(),
                rank: placement.rank,
                world: placement.world_size,
            })
        }

        /// Runs `f` with the communicator and the device's stream.
        fn with_comm<R>(
            &self,
            f: impl FnOnce(Comm, Stream) -> candle_core::Result<R>,
        ) -> candle_core::Result<R> {
            let comm = self.comm.lock().map_err(|_| err("a rank panicked in a collective"))?;
            let stream = self.device.cuda_stream();
            f(comm.0, stream.cu_stream() as Stream)
        }

        /// A sum over the ranks of a device buffer of `n` f32s or f64s, into a new buffer.
        fn all_reduce_slice<T: cudarc::driver::DeviceRepr + cudarc::driver::ValidAsZeroBits>(
            &self,
            send: &CudaSlice<T>,
            n: usize,
            dtype: i32,
        ) -> candle_core::Result<CudaSlice<T>> {
            let stream = self.device.cuda_stream();
            let mut recv = stream.alloc_zeros::<T>(n).map_err(err)?;
            self.with_comm(|comm, s| {
                let (src, _r) = send.device_ptr(&stream);
                let (dst, _w) = recv.device_ptr_mut(&stream);
                // SAFETY: both buffers hold `n` elements of `dtype` on this rank's device.
                let code = unsafe {
                    (self.lib.api.all_reduce)(
                        src as *const _,
                        dst as *mut _,
                        n,
                        dtype,
                        SUM,
                        comm,
                        s,
                    )
                };
                self.lib.check("ncclAllReduce", code).map_err(err)
            })?;
            Ok(recv)
        }

        fn to_device<T: cudarc::driver::DeviceRepr>(
            &self,
            host: &[T],
        ) -> candle_core::Result<CudaSlice<T>> {
            self.device.cuda_stream().clone_htod(host).map_err(err)
        }

        fn to_host<T: cudarc::driver::DeviceRepr + Default + Clone>(
            &self,
            dev: &CudaSlice<T>,
        ) -> candle_core::Result<Vec<T>> {
            self.device.cuda_stream().clone_dtoh(dev).map_err(err)
        }
    }

    impl Drop for Nccl {
        fn drop(&mut self) {
            if let Ok(comm) = self.comm.lock() {
                // SAFETY: the communicator is not used after this.
                let _ = unsafe { (self.lib.api.comm_destroy)(comm.0) };
            }
        }
    }

    impl Collective for Nccl {
        fn rank(&self) -> usize {
            self.rank
        }

        fn world_size(&self) -> usize {
            self.world
        }

        fn all_reduce_sum(&self, tensors: &mut [Tensor]) -> candle_core::Result<()> {
            if self.world <= 1 || tensors.is_empty() {
                return Ok(());
            }
            let device = Device::Cuda(self.device.clone());
            // One buffer for all of them, packed on the device.
            let parts = tensors
                .iter()
                .map(|t| t.to_device(&device)?.to_dtype(DType::F32)?.flatten_all())
                .collect::<candle_core::Result<Vec<_>>>()?;
            let flat = Tensor::cat(&parts, 0)?.contiguous()?;
            let n = flat.elem_count();
            let summed = {
                let (storage, layout) = flat.storage_and_layout();
                let Storage::Cuda(cs) = &*storage else {
                    candle_core::bail!("NCCL: the packed gradients are not on the GPU")
                };
                let slice = cs.as_cuda_slice::<f32>()?;
                let slice = slice.slice(layout.start_offset()..layout.start_offset() + n);
                let owned = self.device.cuda_stream().clone_dtod(&slice).map_err(err)?;
                self.all_reduce_slice(&owned, n, FLOAT32)?
            };
            let storage = Storage::Cuda(CudaStorage::wrap_cuda_slice(summed, self.device.clone()));
            let summed = Tensor::from_storage(storage, n, BackpropOp::none(), false);
            let mut at = 0;
            for t in tensors.iter_mut() {
                let k = t.elem_count();
                *t = summed
                    .narrow(0, at, k)?
                    .reshape(t.shape())?
                    .to_dtype(t.dtype())?
                    .to_device(t.device())?;
                at += k;
            }
            Ok(())
        }

        fn all_reduce_f64(&self, values: &mut [f64]) -> candle_core::Result<()> {
            if self.world <= 1 || values.is_empty() {
                return Ok(());
            }
            let send = self.to_device(values)?;
            let sum = self.all_reduce_slice(&send, values.len(), FLOAT64)?;
            values.copy_from_slice(&self.to_host(&sum)?);
            Ok(())
        }

        fn reduce_scatter_f32(&self, flat: &[f32]) -> candle_core::Result<Vec<f32>> {
            let blocks = Blocks::new(flat.len(), self.world);
            let b = blocks.block();
            let mut padded = flat.to_vec();
            padded.resize(b * self.world, 0.0);
            let send = self.to_device(&padded)?;
            let stream = self.device.cuda_stream();
            let mut recv = stream.alloc_zeros::<f32>(b.max(1)).map_err(err)?;
            self.with_comm(|comm, s| {
                let (src, _r) = send.device_ptr(&stream);
                let (dst, _w) = recv.device_ptr_mut(&stream);
                // SAFETY: `send` holds world·b floats, `recv` at least b.
                let code = unsafe {
                    (self.lib.api.reduce_scatter)(
                        src as *const _,
                        dst as *mut _,
                        b,
                        FLOAT32,
                        SUM,
                        comm,
                        s,
                    )
                };
                self.lib.check("ncclReduceScatter", code).map_err(err)
            })?;
            let mut mine = self.to_host(&recv)?;
            mine.truncate(blocks.range(self.rank).len());
            Ok(mine)
        }

        fn all_gather_f32(&self, mine: &[f32], len: usize) -> candle_core::Result<Vec<f32>> {
            let blocks = Blocks::new(len, self.world);
            if mine.len() != blocks.range(self.rank).len() {
                candle_core::bail!("all-gather: a block of {} for {len} elements", mine.len());
            }
            let b = blocks.block();
            let mut padded = mine.to_vec();
            padded.resize(b, 0.0);
            let send = self.to_device(&padded)?;
            let stream = self.device.cuda_stream();
            let mut recv = stream.alloc_zeros::<f32>((b * self.world).max(1)).map_err(err)?;
            self.with_comm(|comm, s| {
                let (src, _r) = send.device_ptr(&stream);
                let (dst, _w) = recv.device_ptr_mut(&stream);
                // SAFETY: `send` holds b floats, `recv` world·b.
                let code = unsafe {
                    (self.lib.api.all_gather)(src as *const _, dst as *mut _, b, FLOAT32, comm, s)
                };
                self.lib.check("ncclAllGather", code).map_err(err)
            })?;
            let mut all = self.to_host(&recv)?;
            all.truncate(len);
            Ok(all)
        }
    }
}
