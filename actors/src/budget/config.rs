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
                total.checked_sub(self.host_safety_margin.0).filter(|b| *b > 0).ok_or_else(|| {
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
