//! Generates the prost types of criu-amdgpu.proto. Usage: `images-protogen PROTO_DIR OUT_DIR`.

use std::path::PathBuf;
use std::process::ExitCode;

fn main() -> ExitCode {
    let args: Vec<PathBuf> = std::env::args_os().skip(1).map(PathBuf::from).collect();
    let [proto_dir, out_dir] = args.as_slice() else {
        eprintln!("usage: images-protogen PROTO_DIR OUT_DIR");
        return ExitCode::from(2);
    };
    let mut config = prost_build::Config::new();
    config.out_dir(out_dir);
    // `bytes` fields as Vec<u8>: the plugin hands priv_data to the kernel as a plain buffer.
    if let Err(e) = config.compile_protos(&[proto_dir.join("criu-amdgpu.proto")], &[proto_dir]) {
        eprintln!("images-protogen: {e}");
        return ExitCode::FAILURE;
    }
    ExitCode::SUCCESS
}
