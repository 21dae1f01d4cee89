//! The model's text in `DESCRIBE`: the encoders' stages, then the winning mixer.

use super::columns::*;
use super::encoders::*;

pub(super) fn model_text(columns: &[InputColumn], mixer_stage: &str) -> String {
    let names = |keep: &dyn Fn(&InputColumn) -> bool| -> Vec<&str> {
        columns
            .iter()
            .filter(|column| keep(column))
            .map(|column| column.name.as_str())
            .collect()
    };
    let excluded = |kind: ColumnKind| {
        move |column: &InputColumn| {
            column.kind == kind && matches!(column.encoder, Encoder::Excluded)
        }
    };
    let stages = [
        (
            "Numeric scaling (",
            ")",
            names(&|c| matches!(c.encoder, Encoder::Scale(_))),
        ),
        (
            "One-hot (",
            ")",
            names(&|c| matches!(c.encoder, Encoder::OneHot { .. })),
        ),
        (
            "Target means (",
            ")",
            names(&|c| matches!(c.encoder, Encoder::TargetMean { .. })),
        ),
        (
            "Hashed words and word pairs (",
            ")",
            names(&|c| matches!(c.encoder, Encoder::HashedWords { .. })),
        ),
        (
            "Binary (",
            ")",
            names(&|c| matches!(c.encoder, Encoder::Flag)),
        ),
        (
            "Date parts: year, month, day, day of week (",
            ")",
            names(&|c| matches!(c.encoder, Encoder::CalendarParts { hour: false, .. })),
        ),
        (
            "Timestamp parts: year, month, day, day of week, hour (",
            ")",
            names(&|c| matches!(c.encoder, Encoder::CalendarParts { hour: true, .. })),
        ),
        (
            "excluded (free text): ",
            "",
            names(&excluded(ColumnKind::Text)),
        ),
        (
            "excluded (unsupported type): ",
            "",
            names(&excluded(ColumnKind::Unsupported)),
        ),
    ];
    stages
        .into_iter()
        .filter(|(_, _, names)| !names.is_empty())
        .map(|(before, after, names)| format!("{before}{}{after}", names.join(", ")))
        .chain(std::iter::once(mixer_stage.to_owned()))
        .collect::<Vec<_>>()
        .join(" --> ")
}
