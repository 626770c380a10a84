//! Generates the control plane's Rust code from its .proto file (see Cargo.toml).

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../crates/weir-cluster");
    let out = root.join("src/proto");
    std::fs::create_dir_all(&out)?;
    tonic_prost_build::configure()
        .build_client(true)
        .build_server(true)
        .out_dir(&out)
        .compile_protos(&[root.join("proto/cluster.proto")], &[root.join("proto")])?;
    println!("wrote {}", out.join("weir.cluster.v1.rs").display());
    Ok(())
}
