fn main() -> std::process::ExitCode {
    iteragpu::run(std::env::args_os())
}
