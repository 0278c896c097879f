fn main() {
    eprintln!("kube-prestop-sidecar: not implemented yet");
    std::process::exit(2);
}
