//! Compiles the gRPC definitions in proto/ (with protox: no protoc needed), only with
//! the `daemon` feature: nothing else uses them.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    println!("cargo:rerun-if-changed=proto");
    #[cfg(feature = "daemon")]
    {
        let fds = protox::compile(["proto/cuzk/v1/proving.proto", "proto/cuzk/ext/v1/ext.proto"], ["proto"])?;
        tonic_build::configure().build_server(true).build_client(true).compile_fds(fds)?;
    }
    Ok(())
}
