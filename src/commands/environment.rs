//! `iteragpu environment`: the driver's view and the interpreter's, and whether measure can run.
//! Exits 0 whatever it finds.

use std::io::Write;

use crate::cli::EnvironmentArgs;
use crate::environment;
use crate::exit::{CliError, ExitStatus};

pub fn run(args: &EnvironmentArgs, out: &mut dyn Write) -> Result<ExitStatus, CliError> {
    let env = environment::collect(
        &args.device,
        args.python.as_deref(),
        std::time::Duration::from_secs(args.timeout),
    );
    let text = super::json_or(args.json, &env, || {
        environment::render::report(&env, &args.device)
    })?;
    out.write_all(text.as_bytes())
        .map_err(|e| CliError::because("cannot write to standard output", &e))?;
    Ok(ExitStatus::Ok)
}
