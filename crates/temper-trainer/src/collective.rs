//! Collectives for data parallelism: each rank computes gradients on its share of a batch and
//! they are summed across ranks before the (identical) optimizer step on every rank.
//!
//! [`Single`] is the one-process case; [`InProcess`] runs ranks as threads of one process (CPU
//! tests); [`crate::mpi::Mpi`] (cargo feature `mpi`) runs them as processes started by `mpirun`
//! or `srun`. A GPU collective (NCCL) implements the same trait.
//!
//! Besides all-reduce, the trait has the two halves of a sharded optimizer step: a reduce-scatter
//! (each rank gets its [`Blocks`] block of the summed gradients) and an all-gather (every rank
//! gets the whole vector back from the ranks' blocks). Their default implementations go through
//! `all_reduce_sum` and are exact; an implementation with real collectives overrides them.

use std::fmt;
use std::ops::Range;
use std::sync::{Arc, Barrier, Mutex};

use candle_core::{DType, Tensor};

/// A group of ranks that can sum values across all of them.
pub trait Collective: Send + Sync + fmt::Debug {
    /// This process's (or thread's) rank, `0..world_size`.
    fn rank(&self) -> usize;
    /// Number of ranks.
    fn world_size(&self) -> usize;
    /// Replaces each tensor with its sum over all ranks (same shapes on every rank). Every rank
    /// gets the same result, bit for bit.
    fn all_reduce_sum(&self, tensors: &mut [Tensor]) -> candle_core::Result<()>;
    /// Replaces each value with its sum over all ranks.
    fn all_reduce_f64(&self, values: &mut [f64]) -> candle_core::Result<()>;

    /// Sums `flat` (the same length on every rank) over the ranks and returns this rank's block
    /// of the sum (`Blocks::new(flat.len(), world).range(rank)`), summed in f32.
    fn reduce_scatter_f32(&self, flat: &[f32]) -> candle_core::Result<Vec<f32>> {
        let blocks = Blocks::new(flat.len(), self.world_size());
        let mut t = [Tensor::from_slice(flat, flat.len(), &candle_core::Device::Cpu)?];
        self.all_reduce_sum(&mut t)?;
        let [t] = t;
        let range = blocks.range(self.rank());
        t.narrow(0, range.start, range.len())?.to_vec1()
    }

    /// The vector of `len` elements whose blocks the ranks hold: `mine` is this rank's
    /// (`Blocks::new(len, world).range(rank)`).
    fn all_gather_f32(&self, mine: &[f32], len: usize) -> candle_core::Result<Vec<f32>> {
        let range = Blocks::new(len, self.world_size()).range(self.rank());
        if mine.len() != range.len() {
            candle_core::bail!(
                "all-gather: a block of {} for {} elements",
                mine.len(),
                range.len()
            );
        }
        // The other ranks contribute zeros here, and x + 0 is x: the sum is the concatenation.
        let mut whole = vec![0f32; len];
        whole[range].copy_from_slice(mine);
        let mut t = [Tensor::from_vec(whole, len, &candle_core::Device::Cpu)?];
        self.all_reduce_sum(&mut t)?;
        let [t] = t;
        t.to_vec1()
    }
}

/// Every tensor's elements end to end, as f32 (what an all-reduce of the tensors sends).
pub fn flatten_f32(tensors: &[Tensor]) -> candle_core::Result<Vec<f32>> {
    let mut flat = Vec::with_capacity(tensors.iter().map(Tensor::elem_count).sum());
    for t in tensors {
        flat.extend(t.flatten_all()?.to_dtype(DType::F32)?.to_vec1::<f32>()?);
    }
    Ok(flat)
}

/// Replaces each tensor with its part of `flat` (the layout of [`flatten_f32`]), keeping its
/// shape, dtype and device.
pub fn unflatten_into(tensors: &mut [Tensor], flat: &[f32]) -> candle_core::Result<()> {
    let mut at = 0;
    for t in tensors.iter_mut() {
        let n = t.elem_count();
        let part = Tensor::from_slice(&flat[at..at + n], t.shape(), &candle_core::Device::Cpu)?;
        *t = part.to_device(t.device())?.to_dtype(t.dtype())?;
        at += n;
    }
    Ok(())
}

/// How a flat vector of `len` elements is split across `world` ranks: rank `r` holds the block
/// `[r·b, min((r+1)·b, len))` with `b = ⌈len / world⌉` (the last blocks may be short or empty).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Blocks {
    len: usize,
    block: usize,
}

impl Blocks {
    /// The split of `len` elements over `world` ranks (at least one).
    pub fn new(len: usize, world: usize) -> Self {
        Self { len, block: len.div_ceil(world.max(1)) }
    }

    /// Elements in a full block.
    pub fn block(&self) -> usize {
        self.block
    }

    /// Rank `rank`'s elements.
    pub fn range(&self, rank: usize) -> Range<usize> {
        let start = (rank * self.block).min(self.len);
        start..(start + self.block).min(self.len)
    }
}

/// One rank: every collective is the identity.
#[derive(Debug, Clone, Copy, Default)]
pub struct Single;

impl Collective for Single {
    fn rank(&self) -> usize {
        0
    }
    fn world_size(&self) -> usize {
        1
    }
    fn all_reduce_sum(&self, _tensors: &mut [Tensor]) -> candle_core::Result<()> {
        Ok(())
    }
    fn all_reduce_f64(&self, _values: &mut [f64]) -> candle_core::Result<()> {
        Ok(())
    }
}

#[derive(Debug)]
struct Shared {
    barrier: Barrier,
    slots: Mutex<Vec<Vec<f64>>>,
    result: Mutex<Result<Arc<Vec<f64>>, String>>,
}

/// Ranks that are threads of one process. Sums are taken in rank order, so every rank gets the
/// same bits and the result does not depend on thread timing.
#[derive(Debug, Clone)]
pub struct InProcess {
    rank: usize,
    world: usize,
    shared: Arc<Shared>,
}

impl InProcess {
    /// A group of `world` ranks (at least one); give one to each thread.
    pub fn group(world: usize) -> Vec<InProcess> {
        let world = world.max(1);
        let shared = Arc::new(Shared {
            barrier: Barrier::new(world),
            slots: Mutex::new(vec![Vec::new(); world]),
            result: Mutex::new(Err("no reduction yet".into())),
        });
        (0..world).map(|rank| InProcess { rank, world, shared: shared.clone() }).collect()
    }

    /// Sums every rank's `mine` in rank order; `as_f32` sums in f32 arithmetic (the values are
    /// f32s), as an all-reduce of f32 tensors does.
    fn reduce(&self, mine: Vec<f64>, as_f32: bool) -> candle_core::Result<Arc<Vec<f64>>> {
        let lock_err = || candle_core::Error::Msg("a rank panicked during an all-reduce".into());
        self.shared.slots.lock().map_err(|_| lock_err())?[self.rank] = mine;
        self.shared.barrier.wait();
        if self.rank == 0 {
            let result = {
                let mut slots = self.shared.slots.lock().map_err(|_| lock_err())?;
                let parts: Vec<Vec<f64>> = slots.iter_mut().map(std::mem::take).collect();
                let len = parts[0].len();
                match parts.iter().position(|p| p.len() != len) {
                    Some(r) => Err(format!(
                        "all-reduce of {len} values on rank 0 and {} on rank {r}",
                        parts[r].len()
                    )),
                    None if as_f32 => {
                        let mut sum: Vec<f32> = parts[0].iter().map(|&x| x as f32).collect();
                        for p in &parts[1..] {
                            for (s, &o) in sum.iter_mut().zip(p) {
                                *s += o as f32;
                            }
                        }
                        Ok(Arc::new(sum.into_iter().map(f64::from).collect()))
                    }
                    None => {
                        let mut sum = parts[0].clone();
                        for p in &parts[1..] {
                            for (s, &o) in sum.iter_mut().zip(p) {
                                *s += o;
                            }
                        }
                        Ok(Arc::new(sum))
                    }
                }
            };
            *self.shared.result.lock().map_err(|_| lock_err())? = result;
        }
        self.shared.barrier.wait();
        let out = self.shared.result.lock().map_err(|_| lock_err())?.clone();
        // Everyone has read the result before the next reduction may overwrite it.
        self.shared.barrier.wait();
        out.map_err(candle_core::Error::Msg)
    }
}

impl Collective for InProcess {
    fn rank(&self) -> usize {
        self.rank
    }
    fn world_size(&self) -> usize {
        self.world
    }
    fn all_reduce_sum(&self, tensors: &mut [Tensor]) -> candle_core::Result<()> {
        if self.world <= 1 {
            return Ok(());
        }
        let flat = flatten_f32(tensors)?.into_iter().map(f64::from).collect();
        let summed = self.reduce(flat, true)?;
        let summed: Vec<f32> = summed.iter().map(|&x| x as f32).collect();
        unflatten_into(tensors, &summed)?;
        Ok(())
    }
    fn all_reduce_f64(&self, values: &mut [f64]) -> candle_core::Result<()> {
        if self.world <= 1 {
            return Ok(());
        }
        let sum = self.reduce(values.to_vec(), false)?;
        values.copy_from_slice(&sum);
        Ok(())
    }
}

/// Who started this process, as far as its environment tells.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Launcher {
    /// Nobody: one process.
    Alone,
    /// torchrun-style `RANK`/`WORLD_SIZE`, with `MASTER_ADDR`/`MASTER_PORT` for the rendezvous.
    Torchrun,
    /// Open MPI's `mpirun` (`OMPI_COMM_WORLD_RANK`/`OMPI_COMM_WORLD_SIZE`) or a PMI launcher
    /// (`PMI_RANK`/`PMI_SIZE`): MPI finds its peers itself.
    Mpi,
    /// Slurm's `srun` (`SLURM_PROCID`/`SLURM_NTASKS`), whose PMI lets MPI find its peers.
    Slurm,
}

/// Where this process sits in a multi-process job, from the variables its launcher sets (the
/// first pair found wins): `RANK`/`WORLD_SIZE` (torchrun), `OMPI_COMM_WORLD_RANK`/
/// `OMPI_COMM_WORLD_SIZE` (Open MPI's mpirun), `PMI_RANK`/`PMI_SIZE`, or Slurm's
/// `SLURM_PROCID`/`SLURM_NTASKS`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Placement {
    /// This process's rank.
    pub rank: usize,
    /// Number of processes.
    pub world_size: usize,
    /// This process's rank among those of its node (`LOCAL_RANK`, `OMPI_COMM_WORLD_LOCAL_RANK`,
    /// `MPI_LOCALRANKID` or `SLURM_LOCALID`, as its launcher sets; 0 when none is set): which of
    /// the node's GPUs it takes.
    pub local_rank: usize,
    /// Address and port of rank 0's rendezvous, when given.
    pub master: Option<(String, u16)>,
    /// Which variables the placement came from.
    pub launcher: Launcher,
}

impl Placement {
    /// Reads the placement through `var` (`std::env::var` in the binary; a map in tests).
    /// Without any of the variables, a single process.
    pub fn from_vars(var: impl Fn(&str) -> Option<String>) -> Result<Self, String> {
        let num = |name: &str| -> Result<Option<usize>, String> {
            match var(name) {
                None => Ok(None),
                Some(v) => v
                    .trim()
                    .parse()
                    .map(Some)
                    .map_err(|_| format!("{name}={v:?} is not a non-negative integer")),
            }
        };
        let pairs = [
            ("RANK", "WORLD_SIZE", "LOCAL_RANK", Launcher::Torchrun),
            (
                "OMPI_COMM_WORLD_RANK",
                "OMPI_COMM_WORLD_SIZE",
                "OMPI_COMM_WORLD_LOCAL_RANK",
                Launcher::Mpi,
            ),
            ("PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID", Launcher::Mpi),
            ("SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID", Launcher::Slurm),
        ];
        let mut found = (0, 1, Launcher::Alone, "default");
        let mut local_rank = 0;
        for (rank, size, local, launcher) in pairs {
            match (num(rank)?, num(size)?) {
                (Some(r), Some(w)) => {
                    found = (r, w, launcher, rank);
                    local_rank = num(local)?.unwrap_or(0);
                    break;
                }
                (Some(_), None) | (None, Some(_)) if launcher == Launcher::Torchrun => {
                    return Err("set both RANK and WORLD_SIZE, or neither".into());
                }
                _ => {}
            }
        }
        let (rank, world, launcher, source) = found;
        if world == 0 || rank >= world {
            return Err(format!("{source}: rank {rank} is not below world size {world}"));
        }
        let master = match (var("MASTER_ADDR"), var("MASTER_PORT")) {
            (Some(addr), Some(port)) => {
                let port = port
                    .trim()
                    .parse::<u16>()
                    .map_err(|_| format!("MASTER_PORT={port:?} is not a port number"))?;
                Some((addr, port))
            }
            (None, None) => None,
            _ => return Err("set both MASTER_ADDR and MASTER_PORT, or neither".into()),
        };
        if world > 1 && launcher == Launcher::Torchrun && master.is_none() {
            return Err(format!(
                "RANK/WORLD_SIZE say {world} processes but MASTER_ADDR/MASTER_PORT are not set"
            ));
        }
        if local_rank > rank {
            return Err(format!("local rank {local_rank} is above rank {rank} ({source})"));
        }
        Ok(Self { rank, world_size: world, local_rank, master, launcher })
    }
}
