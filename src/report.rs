//! The decision side of the guide: the fiche (what it says: `fiche`, one file per section, worded
//! from `fiche::facts::Facts`; how it is written: `export`; how numbers read: `format`; what it says
//! in English and French: `catalog`), runs side by side (`comparison`) and the need
//! that `cards` compares (`need`). The files they are made from are read by `schema::load`.

pub mod catalog;
pub mod comparison;
pub mod document;
pub mod export;
pub mod fiche;
pub mod format;
pub mod need;
pub mod snapshot;
