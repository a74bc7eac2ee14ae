//! A submission's job specification, by proof kind (PoRep from its C1 output;
//! WinningPoSt and WindowPoSt partitions and SnapDeals updates from vanilla proofs):
//! the proof type from `registered_proof` (filecoin-ffi's numbering), the inputs
//! checked on receipt so a malformed one is INVALID_ARGUMENT now and not a failed
//! job later, and the request id (the client's, or one named by the inputs).

use tonic::Status;
use tracing::warn;

use super::{convert::priority, request_id::content_id, Service};
use crate::{
    daemon::{proto, results::JobKey},
    filecoin::{self as fil, PorepError},
    JobSpec,
};

/// A Curio circuit id (`porep-32g`, `winning-2k`, `wpost-64g`, `snap-512m`).
pub(super) fn circuit_for_id(id: &str) -> Result<fil::CircuitId, Status> {
    fil::CircuitId::from_curio_id(id).map_err(Status::invalid_argument)
}

/// Clears the top two bits of a 32-byte PoSt randomness, as filecoin-ffi does
/// before it generates or verifies a PoSt (Lotus and Curio pass it so already).
fn post_randomness(b: &[u8]) -> Result<[u8; 32], Status> {
    let mut r: [u8; 32] = b
        .try_into()
        .map_err(|_| Status::invalid_argument(format!("randomness is {} bytes; a PoSt needs 32", b.len())))?;
    r[31] &= 0x3f;
    Ok(r)
}

/// What a vanilla-proof request's parts weigh together, checked against the input
/// limit before anything is decoded.
pub(super) fn vanilla_bytes(req: &proto::SubmitProofRequest) -> usize {
    req.vanilla_proofs.iter().map(Vec::len).sum::<usize>() + req.vanilla_proof.len()
}

/// The vanilla proofs of a PoSt or SnapDeals request: field 11, or (from a client
/// that packs them in field 10) the JSON array of base64 strings cuzk-bench and
/// Curio's storage write.
/// Takes them out of `req` (no copy). JSON decoding: call it on a blocking thread.
fn vanilla_list(req: &mut proto::SubmitProofRequest) -> Result<Vec<Vec<u8>>, Status> {
    if !req.vanilla_proofs.is_empty() {
        return Ok(std::mem::take(&mut req.vanilla_proofs));
    }
    if req.vanilla_proof.is_empty() {
        return Err(Status::invalid_argument(
            "vanilla_proofs is empty: it must carry one vanilla proof per sector (PoSt) or per partition (SnapDeals)",
        ));
    }
    fil::vanilla_json(&req.vanilla_proof).map_err(|e| {
        Status::invalid_argument(format!("vanilla_proofs (field 11) is empty and vanilla_proof is not one: {e}"))
    })
}

/// Logs a request's sector size when it contradicts its proof type's: the
/// registered proof decides the circuit and the vanilla proofs are checked against
/// it, so the size cannot make a wrong proof (Curio's cuzk-bench always sends 32GiB).
fn check_sector_size(req: &proto::SubmitProofRequest, proof: &str, size: u64) {
    if req.sector_size != 0 && req.sector_size != size {
        warn!(
            sector_size = req.sector_size,
            registered_proof = req.registered_proof,
            proof,
            "request's sector_size differs from its registered proof's; proving the registered proof's"
        );
    }
}

/// A WinningPoSt or WindowPoSt-partition request: the proof type from
/// `registered_proof` (filecoin-ffi's numbering), the vanilla proofs decoded and
/// checked against the challenges on receipt (INVALID_ARGUMENT naming the problem),
/// the circuits handed to the engine built.
pub(super) async fn post_spec(
    req: proto::SubmitProofRequest,
    key: &JobKey,
    winning: bool,
) -> Result<(JobSpec, String, String), Status> {
    let proof = fil::post_from_number(req.registered_proof).ok_or_else(|| {
        Status::invalid_argument(format!(
            "registered_proof {} is not a PoSt proof (filecoin-ffi's numbering: 0-4 WinningPoSt, 5-9 WindowPoSt \
             v1, 10-14 WindowPoSt v1.1; 2KiB to 64GiB)",
            req.registered_proof
        ))
    })?;
    if fil::post::is_winning(proof) != winning {
        return Err(Status::invalid_argument(format!(
            "registered_proof {} is {proof:?}, not a {} proof",
            req.registered_proof,
            if winning { "WinningPoSt" } else { "WindowPoSt" }
        )));
    }
    check_sector_size(&req, &format!("{proof:?}"), u64::from(proof.sector_size()));
    let randomness = post_randomness(&req.randomness)?;
    let (priority_level, partition_index) = (req.priority, req.partition_index);
    let key = key.clone();
    // Decoding (JSON), hashing and checking up to `max_message_bytes` of vanilla
    // proofs: on a blocking thread, never on the runtime's few threads.
    let (request_id, parts) = tokio::task::spawn_blocking(move || -> Result<_, Status> {
        let mut req = req;
        let vanilla_proofs = vanilla_list(&mut req)?;
        let request_id = if req.request_id.is_empty() {
            let index = req.partition_index.to_le_bytes();
            let parts: Vec<&[u8]> = std::iter::once(&randomness[..])
                .chain(std::iter::once(&index[..]))
                .chain(vanilla_proofs.iter().map(Vec::as_slice))
                .collect();
            content_id(&key, &parts)
        } else {
            std::mem::take(&mut req.request_id)
        };
        let request = fil::PostRequest {
            proof,
            randomness,
            prover_id: fil::prover_id_from_actor(req.miner_id),
            vanilla_proofs,
            partition: (!winning).then_some(req.partition_index as usize),
        };
        let parts = fil::post_circuits(request)
            .map_err(|e| Status::invalid_argument(format!("miner {}: {e}", req.miner_id)))?;
        Ok((request_id, parts))
    })
    .await
    .map_err(|e| Status::internal(format!("vanilla proof validation: {e}")))??;
    let spec = JobSpec::prepared(fil::CircuitId::PoSt(proof), parts).with_priority(priority(priority_level));
    let what = if winning { format!("{proof:?}") } else { format!("{proof:?} partition {partition_index}") };
    Ok((spec, request_id, what))
}

/// A SnapDeals request: the update proof type from `registered_proof`, the
/// commitments (raw 32 bytes or their CIDs) and the vanilla partition proofs
/// checked against them on receipt.
pub(super) async fn update_spec(
    req: proto::SubmitProofRequest,
    key: &JobKey,
) -> Result<(JobSpec, String, String), Status> {
    let proof = fil::update_from_number(req.registered_proof).ok_or_else(|| {
        Status::invalid_argument(format!(
            "registered_proof {} is not an update proof (filecoin-ffi's numbering: 0-4, 2KiB to 64GiB)",
            req.registered_proof
        ))
    })?;
    check_sector_size(&req, &format!("{proof:?}"), u64::from(proof.sector_size()));
    let comm = |name: &str, b: &[u8]| fil::commitment(name, b).map_err(Status::invalid_argument);
    let (comm_r_old, comm_r_new, comm_d_new) = (
        comm("comm_r_old", &req.comm_r_old)?,
        comm("comm_r_new", &req.comm_r_new)?,
        comm("comm_d_new", &req.comm_d_new)?,
    );
    let priority_level = req.priority;
    let key = key.clone();
    // As for PoSt: decoding, hashing and checking on a blocking thread.
    let (request_id, parts) = tokio::task::spawn_blocking(move || -> Result<_, Status> {
        let mut req = req;
        let vanilla_proofs = vanilla_list(&mut req)?;
        let request_id = if req.request_id.is_empty() {
            let parts: Vec<&[u8]> = [&comm_r_old[..], &comm_r_new[..], &comm_d_new[..]]
                .into_iter()
                .chain(vanilla_proofs.iter().map(Vec::as_slice))
                .collect();
            content_id(&key, &parts)
        } else {
            std::mem::take(&mut req.request_id)
        };
        let request = fil::UpdateRequest { proof, vanilla_proofs, comm_r_old, comm_r_new, comm_d_new };
        let parts = fil::update_circuits(request).map_err(|e| {
            Status::invalid_argument(format!("miner {} sector {}: {e}", req.miner_id, req.sector_number))
        })?;
        Ok((request_id, parts))
    })
    .await
    .map_err(|e| Status::internal(format!("vanilla proof validation: {e}")))??;
    let spec = JobSpec::prepared(fil::CircuitId::Update(proof), parts).with_priority(priority(priority_level));
    Ok((spec, request_id, format!("{proof:?}")))
}

impl Service {
    /// A PoRep request: its C1 output validated on receipt, so a malformed C1 is an
    /// InvalidArgument now and not a failed job later; the parsed form goes to
    /// Ingest, which does not parse again. The C1 is authoritative for the proof type
    /// and sector size: a request that says otherwise (Curio's cuzk-bench sends
    /// registered_proof 0 and a 32GiB sector size by default) is logged.
    pub(super) async fn porep_spec(
        &self,
        req: proto::SubmitProofRequest,
        key: &JobKey,
    ) -> Result<(JobSpec, String, String), Status> {
        let bytes = req.vanilla_proof;
        let max = self.max_input;
        // Without a request id, the inputs themselves name the job: a client that
        // lost its connection and submits (or Proves) again finds the same job.
        let explicit_id = (!req.request_id.is_empty()).then_some(req.request_id);
        let k = key.clone();
        let (c1, request_id) = tokio::task::spawn_blocking(move || {
            let c1 = fil::parse_c1(&bytes, max)?;
            let id = explicit_id.unwrap_or_else(|| content_id(&k, &[&bytes]));
            Ok::<_, PorepError>((c1, id))
        })
        .await
        .map_err(|e| Status::internal(format!("C1 validation: {e}")))?
        .map_err(|e| match e {
            PorepError::TooLarge { .. } => Status::resource_exhausted(e.to_string()),
            e => Status::invalid_argument(e.to_string()),
        })?;
        let proof = c1.registered_proof();
        if req.sector_size != 0 && req.sector_size != u64::from(proof.sector_size()) {
            warn!(
                sector_size = req.sector_size,
                c1 = ?proof,
                "request's sector_size differs from the C1 output's; proving the C1's"
            );
        }
        if fil::proof_from_number(req.registered_proof) != Some(proof) {
            warn!(
                registered_proof = req.registered_proof,
                c1 = ?proof,
                "request's registered_proof differs from the C1 output's; proving the C1's"
            );
        }
        let prover_id = fil::prover_id_from_actor(req.miner_id);
        fil::check_replica_id(&c1, &prover_id, req.sector_number).map_err(|e| {
            Status::invalid_argument(format!("miner {} sector {}: {e}", req.miner_id, req.sector_number))
        })?;
        let spec = JobSpec::porep_parsed(c1, prover_id, req.sector_number).with_priority(priority(req.priority));
        Ok((spec, request_id, format!("{proof:?}")))
    }
}
