//! A stream over two devices without a GPU: `cuzk_gpu::fake::FakeDevices` hands
//! partitions out and fails them over with the CUDA backend's own code
//! (`Devices::acquire`, `failover`) and computes on the CPU. Partitions go to both
//! devices at once, a device held shut does not stall the other, and a sticky error
//! on one retires it and moves its partition to the other; every proof verifies.

mod common;

use std::{
    sync::Arc,
    time::{Duration, Instant},
};

use cuzk::{
    actors::{services::SelectedBackend, Fault, FaultKind},
    gpu::{fake::FakeDevices, DeviceHealth},
    Engine, JobSpec, StageName, SyntheticCircuit,
};

fn wait_until(what: &str, mut f: impl FnMut() -> bool) {
    let t = Instant::now();
    while !f() {
        assert!(t.elapsed() < Duration::from_secs(120), "{what}: not within 120 s");
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// An engine on two fake devices (ProveGpu runs a worker per device).
fn engine(devs: &Arc<FakeDevices>) -> Engine {
    let selected = SelectedBackend { backend: devs.clone(), devices: 2, on_device: false, pinned_bytes: 0 };
    Engine::start_with_backend(common::small_config(), selected).unwrap()
}

#[test]
fn partitions_go_to_both_devices_and_one_held_does_not_stall_the_other() {
    let spec = common::spec(512, 2, 1.0, 1.0);
    let srs = common::params(spec);
    let devs = FakeDevices::new(2);
    let engine = engine(&devs);
    devs.shut(0);
    // One-partition jobs. Devices are tried in turn from device 0: the first
    // partition waits there, held; every other one must go to device 1.
    let circuits: Vec<_> = (0..6).map(|i| SyntheticCircuit::new(spec, i).unwrap()).collect();
    let jobs: Vec<_> = circuits
        .iter()
        .map(|c| engine.submit_blocking(JobSpec::circuits(srs.clone(), vec![c.clone()])).unwrap())
        .collect();
    wait_until("five partitions on device 1 while device 0 is held", || devs.executed()[1] >= 5);
    assert_eq!(devs.executed(), vec![1, 5], "one partition waits on the held device, the rest went to the other");
    assert_eq!(devs.most_at_once(), 2, "both devices ran at once");
    devs.open(0);
    for (job, c) in jobs.into_iter().zip(&circuits) {
        let out = job.wait_blocking().unwrap();
        assert!(common::verifies(&srs, &out.proofs[0], &c.public_inputs()));
    }
    // Each device's calls and the time they held it are counted on that device
    // (`cuzk_device_calls_total`, `cuzk_device_held_seconds_total`).
    let stats = engine.devices();
    assert_eq!(stats.iter().map(|d| d.calls as usize).collect::<Vec<_>>(), devs.executed(), "{stats:?}");
    assert!(stats.iter().all(|d| d.held > Duration::ZERO), "{stats:?}");
    engine.shutdown();
}

#[test]
fn a_sticky_error_retires_one_device_and_its_partition_moves_to_the_other() {
    let spec = common::spec(512, 2, 1.0, 1.0);
    let srs = common::params(spec);
    let devs = FakeDevices::new(2);
    let engine = engine(&devs);
    let circuits: Vec<_> = (0..3).map(|i| SyntheticCircuit::new(spec, 10 + i).unwrap()).collect();
    let check = |out: cuzk::JobOutput| {
        for (p, c) in out.proofs.iter().zip(&circuits) {
            assert!(common::verifies(&srs, p, &c.public_inputs()));
        }
    };
    let fault = Fault { stage: StageName::ProveGpu, partition: Some(1), kind: FaultKind::DeviceError };
    let job = JobSpec::circuits(srs.clone(), circuits.clone()).with_fault(fault);
    check(engine.submit_blocking(job).unwrap().wait_blocking().unwrap());
    let stats = engine.snapshot_blocking().devices;
    let retired: Vec<_> = stats.iter().filter(|d| d.health == DeviceHealth::Retired).collect();
    assert_eq!(retired.len(), 1, "{stats:?}");
    assert_eq!(retired[0].partitions_moved, 1, "{stats:?}");
    assert!(retired[0].retired_reason.as_deref().unwrap_or_default().contains("illegal memory access"), "{stats:?}");
    // Later work runs on the device left, none on the retired one.
    let (gone, left) = (retired[0].device, 1 - retired[0].device);
    let before = devs.executed();
    check(engine.submit_blocking(JobSpec::circuits(srs.clone(), circuits.clone())).unwrap().wait_blocking().unwrap());
    let after = devs.executed();
    assert_eq!(after[gone], before[gone], "the retired device took no more work");
    assert_eq!(after[left], before[left] + 3);
    engine.shutdown();
}
