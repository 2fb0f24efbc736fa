//! Prompt prefixes kept for later prompts that begin with the same tokens (a system prompt
//! shared by many requests, the earlier turns of a conversation that an agent sends again each
//! turn): their keys and values are taken from here instead of being prefilled again.
//!
//! Prefixes are kept in whole cache blocks ([`BLOCK`] positions), the blocks shared with the
//! caches of the requests that use them (an f32 CPU cache; other caches are copied). A hit takes
//! the longest kept run of whole blocks that the prompt begins with, leaving at least one token
//! to prefill (its logits start the completion). The least recently used prefixes go first once
//! more positions than the limit are kept, and every prefix goes when the weights change (the
//! keys and values were computed by the old ones).

use temper_model::KvCache;
use temper_model::cache::BLOCK;

/// The kept prefixes.
#[derive(Debug)]
pub(crate) struct PrefixCache {
    entries: Vec<Entry>,
    /// Most positions kept (0: none).
    limit: usize,
    /// Positions kept, counted per prefix (blocks two prefixes share count twice).
    held: usize,
    clock: u64,
}

#[derive(Debug)]
struct Entry {
    tokens: Vec<u32>,
    cache: KvCache,
    used: u64,
}

impl PrefixCache {
    pub(crate) fn new(limit: usize) -> Self {
        Self { entries: Vec::new(), limit, held: 0, clock: 0 }
    }

    /// The longest kept prefix of `prompt` in whole blocks and shorter than it: its length and a
    /// cache holding it.
    pub(crate) fn lookup(&mut self, prompt: &[u32]) -> Option<(usize, KvCache)> {
        let most = prompt.len().saturating_sub(1) / BLOCK * BLOCK;
        let (len, i) = self
            .entries
            .iter()
            .enumerate()
            .map(|(i, e)| {
                let common = e.tokens.iter().zip(prompt).take_while(|(a, b)| a == b).count();
                (common.min(most) / BLOCK * BLOCK, i)
            })
            .filter(|&(len, _)| len > 0)
            .max_by_key(|&(len, _)| len)?;
        self.clock += 1;
        self.entries[i].used = self.clock;
        let cache = self.entries[i].cache.prefix(len).ok()?;
        Some((len, cache))
    }

    /// Keeps the whole blocks of `prompt`, whose keys and values `cache` holds (just prefilled).
    pub(crate) fn insert(&mut self, prompt: &[u32], cache: &KvCache) {
        let len = prompt.len().min(cache.len()) / BLOCK * BLOCK;
        if len == 0 || len > self.limit {
            return;
        }
        let tokens = &prompt[..len];
        self.clock += 1;
        // Already kept within a longer (or equal) prefix: that one serves this prompt too.
        if let Some(e) = self.entries.iter_mut().find(|e| e.tokens.starts_with(tokens)) {
            e.used = self.clock;
            return;
        }
        let Ok(kept) = cache.prefix(len) else { return };
        // Prefixes of this one are served by it from now on.
        let before = self.entries.len();
        self.entries.retain(|e| !tokens.starts_with(&e.tokens));
        if self.entries.len() != before {
            self.held = self.entries.iter().map(|e| e.tokens.len()).sum();
        }
        self.entries.push(Entry { tokens: tokens.to_vec(), cache: kept, used: self.clock });
        self.held += len;
        while self.held > self.limit {
            let Some(oldest) =
                self.entries.iter().enumerate().min_by_key(|(_, e)| e.used).map(|(i, _)| i)
            else {
                break;
            };
            self.held -= self.entries.swap_remove(oldest).tokens.len();
        }
    }

    /// Forgets every prefix (the weights changed).
    pub(crate) fn clear(&mut self) {
        self.entries.clear();
        self.held = 0;
    }

    /// Positions kept.
    pub(crate) fn held(&self) -> usize {
        self.held
    }
}
