//! The sizes of an R1CS circuit: what parameters must match and what a backend allocates.

/// The sizes that decide which parameters a circuit needs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CircuitShape {
    /// Constraints, including one per input.
    pub constraints: usize,
    /// Inputs, including `ONE`.
    pub inputs: usize,
    pub aux: usize,
    /// Inputs plus aux variables present in the A query (= length of the `a` points).
    pub a_query: usize,
    /// Inputs and aux variables present in the B query (= length of the `b_g1` points).
    pub b_query: usize,
}

impl CircuitShape {
    /// log2 of the evaluation domain: the smallest power of two >= constraints.
    pub fn domain_log2(&self) -> u32 {
        self.constraints.max(1).next_power_of_two().trailing_zeros()
    }
}
