//! Ranks as processes over MPI (cargo feature `mpi`): `mpirun -np N temper trainer …` or
//! `srun -n N temper trainer …` with an MPI library such as Open MPI.
//!
//! Sums are MPI's `MPI_SUM` on f32 (tensors) or f64 (scalars); every rank receives the same
//! bits. MPI's default error handler ends the whole job on a communication error, so a rank that
//! dies makes the others fail rather than wait; a rank that meets an error of its own calls
//! [`Mpi::abort`] so that the others do not wait for it in the next collective.

use std::fmt;

use ::mpi::Threading;
use ::mpi::collective::SystemOperation;
use ::mpi::environment::Universe;
use ::mpi::topology::SimpleCommunicator;
use ::mpi::traits::{Communicator, CommunicatorCollectives};
use candle_core::Tensor;

use crate::collective::{Blocks, Collective, flatten_f32, unflatten_into};

/// Elements per MPI call (MPI counts are C ints).
const MAX_COUNT: usize = 1 << 28;

/// Keeps MPI initialised; dropping it finalises MPI, after which no [`Mpi`] may be used. Hold
/// it for the life of the program (it is not `Send`: keep it on the thread that made it).
pub struct MpiSession {
    _universe: Universe,
}

impl fmt::Debug for MpiSession {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("MpiSession")
    }
}

/// MPI's world communicator as a [`Collective`].
#[derive(Debug, Clone, Copy)]
pub struct Mpi {
    rank: usize,
    world: usize,
}

impl Mpi {
    /// Initialises MPI (with thread support, as the collectives run on a worker thread) and
    /// returns the session to hold and the world's collective.
    pub fn init() -> Result<(MpiSession, Mpi), String> {
        let (universe, level) = ::mpi::initialize_with_threading(Threading::Multiple)
            .ok_or("MPI was already initialised in this process")?;
        if matches!(level, Threading::Single | Threading::Funneled) {
            return Err(format!(
                "the MPI library offers thread level {level:?}; temper needs Serialized or Multiple"
            ));
        }
        let world = universe.world();
        let mpi = Mpi { rank: world.rank() as usize, world: world.size() as usize };
        Ok((MpiSession { _universe: universe }, mpi))
    }

    /// The name MPI gives this rank's node.
    pub fn node_name() -> String {
        ::mpi::environment::processor_name().unwrap_or_else(|_| "unknown".into())
    }

    /// Ends every rank of the job with exit code `code` (`MPI_Abort`).
    pub fn abort(&self, code: i32) -> ! {
        SimpleCommunicator::world().abort(code)
    }
}

fn sum_in_place<T>(values: &mut [T])
where
    T: ::mpi::datatype::Equivalence + Copy,
{
    let world = SimpleCommunicator::world();
    for chunk in values.chunks_mut(MAX_COUNT) {
        let send = chunk.to_vec();
        world.all_reduce_into(&send[..], chunk, SystemOperation::sum());
    }
}

impl Collective for Mpi {
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
        let mut flat = flatten_f32(tensors)?;
        sum_in_place(&mut flat);
        unflatten_into(tensors, &flat)?;
        Ok(())
    }

    fn all_reduce_f64(&self, values: &mut [f64]) -> candle_core::Result<()> {
        if self.world > 1 {
            sum_in_place(values);
        }
        Ok(())
    }

    fn reduce_scatter_f32(&self, flat: &[f32]) -> candle_core::Result<Vec<f32>> {
        let blocks = Blocks::new(flat.len(), self.world);
        let b = blocks.block();
        if b > i32::MAX as usize {
            candle_core::bail!("reduce-scatter blocks of {b} elements are past MPI's count limit");
        }
        let mut send = flat.to_vec();
        send.resize(b * self.world, 0.0);
        let mut mine = vec![0f32; b];
        SimpleCommunicator::world().reduce_scatter_block_into(
            &send[..],
            &mut mine[..],
            SystemOperation::sum(),
        );
        mine.truncate(blocks.range(self.rank).len());
        Ok(mine)
    }

    fn all_gather_f32(&self, mine: &[f32], len: usize) -> candle_core::Result<Vec<f32>> {
        let blocks = Blocks::new(len, self.world);
        if mine.len() != blocks.range(self.rank).len() {
            candle_core::bail!("all-gather: a block of {} for {len} elements", mine.len());
        }
        if blocks.block() > i32::MAX as usize {
            candle_core::bail!(
                "all-gather blocks of {} elements are past MPI's count limit",
                blocks.block()
            );
        }
        let mut send = mine.to_vec();
        send.resize(blocks.block(), 0.0);
        let mut all = vec![0f32; blocks.block() * self.world];
        SimpleCommunicator::world().all_gather_into(&send[..], &mut all[..]);
        all.truncate(len);
        Ok(all)
    }
}
