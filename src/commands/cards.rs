//! `iteragpu cards`: the catalog, and whether a need fits on one device of each card.

use std::io::Write;

use crate::cards;
use crate::cli::CardsArgs;
use crate::exit::{CliError, ExitStatus};
use crate::report::need;

pub fn run(args: &CardsArgs, out: &mut dyn Write) -> Result<ExitStatus, CliError> {
    let catalog = cards::catalog();
    let need = match (args.need, &args.from) {
        (Some(bytes), _) => Some(need::Need {
            bytes,
            source: format!("--need {}", bytes.grouped()),
            overhead: None,
        }),
        (None, Some(path)) => Some(need::from_file(path)?),
        (None, None) => None,
    };
    let Some(need) = need.map(need::bounded).transpose()? else {
        let text = super::json_or(args.json, &catalog, || cards::render::catalog(&catalog))?;
        out.write_all(text.as_bytes())?;
        return Ok(ExitStatus::Ok);
    };
    let (overhead, overhead_source) =
        need::overhead(&catalog, args.overhead, need.overhead.clone())?;
    let fits = need::fits(&catalog, need.bytes, overhead);
    let doc = serde_json::json!({"need_bytes": need.bytes.get(), "need_source": need.source, "overhead_bytes": overhead, "overhead_source": overhead_source, "cards": fits});
    let text = super::json_or(args.json, &doc, || {
        need::render_fits(need.bytes, &need.source, overhead, &overhead_source, &fits)
    })?;
    out.write_all(text.as_bytes())?;
    Ok(ExitStatus::Ok)
}
