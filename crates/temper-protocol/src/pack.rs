//! Packing samples into fixed-length rows, and rows into balanced shares for data-parallel
//! ranks: how a [`crate::TrainBatch`]'s micro-batches are laid out. The orchestrator packs RL
//! batches with these rules and `temper sft` its own rows, so both trainers see the same shapes.

/// First-fit decreasing: places samples of the given `lengths` into rows holding at most
/// `capacity` tokens, longest first, each into the first row with room. Returns the sample
/// indices of each row (in placement order). Ties keep the input order, so the result is
/// deterministic. A sample longer than `capacity` gets a row of its own.
pub fn first_fit_decreasing(lengths: &[usize], capacity: usize) -> Vec<Vec<usize>> {
    let mut order: Vec<usize> = (0..lengths.len()).collect();
    order.sort_by(|&a, &b| lengths[b].cmp(&lengths[a]).then(a.cmp(&b)));
    let mut rows: Vec<(usize, Vec<usize>)> = Vec::new();
    for i in order {
        let len = lengths[i];
        match rows.iter_mut().find(|(used, _)| used + len <= capacity) {
            Some((used, members)) => {
                *used += len;
                members.push(i);
            }
            None => rows.push((len, vec![i])),
        }
    }
    rows.into_iter().map(|(_, m)| m).collect()
}

/// Splits rows (given their token counts) among `ranks` so each gets the same number of rows
/// (±1) and token counts as even as a greedy assignment makes them: heaviest rows first, each to
/// the lightest rank that still has room. Returns the row indices of each rank, in row order.
pub fn balance(row_tokens: &[usize], ranks: usize) -> Vec<Vec<usize>> {
    let ranks = ranks.max(1);
    let per_rank = row_tokens.len().div_ceil(ranks);
    let mut order: Vec<usize> = (0..row_tokens.len()).collect();
    order.sort_by(|&a, &b| row_tokens[b].cmp(&row_tokens[a]).then(a.cmp(&b)));
    let mut load = vec![0usize; ranks];
    let mut out: Vec<Vec<usize>> = vec![Vec::new(); ranks];
    for i in order {
        let r = (0..ranks)
            .filter(|&r| out[r].len() < per_rank)
            .min_by_key(|&r| (load[r], r))
            .unwrap_or(0);
        load[r] += row_tokens[i];
        out[r].push(i);
    }
    for o in &mut out {
        o.sort_unstable();
    }
    out
}
