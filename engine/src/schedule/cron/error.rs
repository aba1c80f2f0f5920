//! Errors reported when a cron expression is refused.

use std::fmt;

/// One field of a cron expression, in the order they are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CronField {
    /// Seconds, 0-59 (first field).
    Second,
    /// Minutes, 0-59.
    Minute,
    /// Hours, 0-23.
    Hour,
    /// Day of the month, 1-31, `L`, `L-n`, `LW`, `nW` or `?`.
    DayOfMonth,
    /// Month, 1-12 or `JAN`-`DEC`.
    Month,
    /// Day of the week, 1-7 (1 = Sunday) or `SUN`-`SAT`, `nL`, `n#k` or `?`.
    DayOfWeek,
    /// Year, 1970-2199 (optional seventh field).
    Year,
}

impl CronField {
    /// All fields in the order they are written.
    pub const ALL: [CronField; 7] = [
        CronField::Second,
        CronField::Minute,
        CronField::Hour,
        CronField::DayOfMonth,
        CronField::Month,
        CronField::DayOfWeek,
        CronField::Year,
    ];

    /// The field's name as used in messages: `second`, `minute`, ..., `day-of-week`, `year`.
    pub fn name(self) -> &'static str {
        match self {
            CronField::Second => "second",
            CronField::Minute => "minute",
            CronField::Hour => "hour",
            CronField::DayOfMonth => "day-of-month",
            CronField::Month => "month",
            CronField::DayOfWeek => "day-of-week",
            CronField::Year => "year",
        }
    }
}

impl fmt::Display for CronField {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Why a cron expression was refused.
///
/// `field` names the offending field when the problem lies in one field; it is `None` for
/// problems with the expression as a whole (such as a wrong number of fields). The display form is
/// `"<field>: <message>"`, e.g. `day-of-week: value 0 out of range 1-7 (1=SUN ... 7=SAT)`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{}{message}", FieldPrefix(*.field))]
pub struct CronError {
    /// The field at fault, if the problem is confined to one field.
    pub field: Option<CronField>,
    /// What is wrong, in words.
    pub message: String,
}

impl CronError {
    pub(crate) fn whole(message: impl Into<String>) -> Self {
        CronError {
            field: None,
            message: message.into(),
        }
    }

    pub(crate) fn in_field(field: CronField, message: impl Into<String>) -> Self {
        CronError {
            field: Some(field),
            message: message.into(),
        }
    }
}

struct FieldPrefix(Option<CronField>);

impl fmt::Display for FieldPrefix {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            Some(field) => write!(f, "{field}: "),
            None => Ok(()),
        }
    }
}
