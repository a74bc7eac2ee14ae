use crate::job::BoxedCircuit;

/// One partition's circuit, ready for synthesis.
pub struct PartitionCircuit(pub BoxedCircuit);
