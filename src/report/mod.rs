//! The decision side of the guide: the fiche (what it says: `decision_sheet`; how it is written:
//! `export`; how numbers read: `format`; how terms and ledger lines are named in French: `names`),
//! runs side by side (`comparison`), and the files they are made from (`inputs`).

pub mod comparison;
pub mod decision_sheet;
pub mod document;
pub mod export;
pub mod format;
pub mod names;
pub mod need;
