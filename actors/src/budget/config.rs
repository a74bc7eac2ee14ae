use serde::Deserialize;

use crate::ground::{ByteSize, MemoryLimit};

/// `[budget]`: memory budgets.
#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct BudgetConfig {
    /// Host RAM that partitions in flight may hold: a size ("64GiB", bytes as an
    /// integer) or "auto" = total memory minus `host_safety_margin`.
    pub host_memory: MemoryLimit,
    /// Memory kept free for everything else when `host_memory = "auto"`.
    pub host_safety_margin: ByteSize,
    /// Part of the host budget that only deadline work (WinningPoSt, WindowPoSt)
    /// may use, so that it finds room while PoRep partitions (and a recording)
    /// hold the rest: a size, or "auto" = 1 GiB (a WinningPoSt partition at any
    /// sector size, estimated), at most an eighth of the budget. Deadline work
    /// also goes ahead of every bulk request waiting for memory, so a larger
    /// deadline partition (WindowPoSt at 32GiB) waits for the next PoRep partition
    /// to leave, not for all of them. 0 = none.
    pub deadline_reserve: MemoryLimit,
}

impl Default for BudgetConfig {
    fn default() -> Self {
        BudgetConfig {
            host_memory: MemoryLimit::Auto,
            host_safety_margin: ByteSize(4 << 30),
            deadline_reserve: MemoryLimit::Auto,
        }
    }
}

impl BudgetConfig {
    /// The deadline reserve in bytes for a host budget of `host` bytes.
    pub fn deadline_reserve_bytes(&self, host: u64) -> u64 {
        match self.deadline_reserve {
            MemoryLimit::Bytes(b) => b.0.min(host),
            MemoryLimit::Auto => (1u64 << 30).min(host / 8),
        }
    }

    /// What "auto" gives a machine with `total` bytes of memory: the total less
    /// `host_safety_margin`; `None` when that leaves nothing. The one rule for this
    /// machine ([`Self::host_bytes`]) and for a planned one (`cuzk size --host-memory`).
    #[must_use]
    pub fn auto_bytes_of(&self, total: u64) -> Option<u64> {
        total.checked_sub(self.host_safety_margin.0).filter(|b| *b > 0)
    }

    /// What the budget's ledger gets of `bytes` (from [`Self::host_bytes`] or
    /// [`Self::auto_bytes_of`]) when the GPU backend pins `pinned` bytes: "auto" leaves
    /// the pinned pool out (it is host memory the ledger cannot lend); a number is
    /// the operator's own and stays as given.
    #[must_use]
    pub fn less_pinned(&self, bytes: u64, pinned: u64) -> u64 {
        match self.host_memory {
            MemoryLimit::Auto => bytes.saturating_sub(pinned),
            MemoryLimit::Bytes(_) => bytes,
        }
    }

    /// The host budget in bytes, resolving "auto" with the machine's total memory.
    ///
    /// # Errors
    /// When "auto" leaves nothing after the safety margin.
    pub fn host_bytes(&self) -> Result<u64, String> {
        match self.host_memory {
            MemoryLimit::Bytes(b) => Ok(b.0),
            MemoryLimit::Auto => {
                let mut sys = sysinfo::System::new()
                    .map_err(|e| format!("budget.host_memory = \"auto\": cannot read system memory: {e}"))?;
                sys.refresh_memory();
                let total = sys.total_memory();
                self.auto_bytes_of(total).ok_or_else(|| {
                    format!(
                        "budget.host_memory = \"auto\": total memory {} is not above budget.host_safety_margin {}",
                        ByteSize(total),
                        self.host_safety_margin
                    )
                })
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn auto_is_memory_less_the_margin_and_the_pinned_pool() {
        let auto = BudgetConfig { host_safety_margin: ByteSize(4 << 30), ..BudgetConfig::default() };
        assert_eq!(auto.host_memory, MemoryLimit::Auto);
        assert_eq!(auto.auto_bytes_of(128 << 30), Some(124 << 30));
        assert_eq!(auto.auto_bytes_of(4 << 30), None, "nothing left after the margin");
        assert_eq!(auto.less_pinned(124 << 30, 8 << 30), 116 << 30);
        assert_eq!(auto.less_pinned(4 << 30, 8 << 30), 0);
        // A number is the operator's own: the pinned pool is not taken from it.
        let fixed = BudgetConfig { host_memory: MemoryLimit::Bytes(ByteSize(100 << 30)), ..auto };
        assert_eq!(fixed.less_pinned(100 << 30, 8 << 30), 100 << 30);
        assert_eq!(fixed.host_bytes(), Ok(100 << 30));
    }
}
