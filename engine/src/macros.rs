//! Small declarative helpers for the domain types.

/// Declares an `i64` identifier newtype that is stored as `BIGINT`/`INTEGER` and serialised as
/// a JSON number.
macro_rules! id_type {
    ($(#[$meta:meta])* $name:ident) => {
        $(#[$meta])*
        #[derive(
            Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash,
            serde::Serialize, serde::Deserialize, sqlx::Type,
        )]
        #[serde(transparent)]
        #[sqlx(transparent)]
        pub struct $name(pub i64);

        impl std::fmt::Display for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                write!(f, "{}", self.0)
            }
        }

        impl std::str::FromStr for $name {
            type Err = std::num::ParseIntError;
            fn from_str(s: &str) -> Result<Self, Self::Err> {
                s.parse().map(Self)
            }
        }
    };
}

/// Declares an enum stored as `TEXT` with fixed snake_case spellings, with `as_str`, `Display`,
/// `FromStr`, `TryFrom<String>` (for row decoding) and serde in the same spelling.
macro_rules! text_enum {
    ($(#[$meta:meta])* $name:ident { $($(#[$vmeta:meta])* $variant:ident = $text:literal),+ $(,)? }) => {
        $(#[$meta])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
        pub enum $name {
            $($(#[$vmeta])* #[serde(rename = $text)] $variant),+
        }

        impl $name {
            /// Every value, in declaration order.
            pub const ALL: &'static [$name] = &[$($name::$variant),+];

            /// The stored and serialised spelling.
            pub fn as_str(self) -> &'static str {
                match self {
                    $($name::$variant => $text),+
                }
            }
        }

        impl std::fmt::Display for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(self.as_str())
            }
        }

        impl std::str::FromStr for $name {
            type Err = $crate::UnknownVariant;
            fn from_str(s: &str) -> Result<Self, Self::Err> {
                match s {
                    $($text => Ok($name::$variant),)+
                    other => Err($crate::UnknownVariant {
                        kind: stringify!($name),
                        value: other.to_owned(),
                        expected: &[$($text),+],
                    }),
                }
            }
        }

        impl TryFrom<String> for $name {
            type Error = $crate::UnknownVariant;
            fn try_from(s: String) -> Result<Self, Self::Error> {
                s.parse()
            }
        }
    };
}

/// `sqlx::FromRow` on both backends' rows for a struct stored as one table's row, with the
/// fields listed in the table's column order (column name = field name). A row whose columns
/// begin with those (`SELECT *`, `RETURNING *`, `t.*`) is read by position; any other row by
/// name. Looking each column up by name costs a hash of the name and a comparison per column
/// and row: for runs and tasks, read several times on every run's way, a large part of the
/// engine's CPU. `value` fields decode as they are; `text` fields are read as `TEXT` and
/// parsed with `FromStr` ([`text_enum`]) from the row's bytes, a value of no variant being a decode
/// error that names the column.
///
/// Where PostgreSQL's table orders its columns otherwise, a second list names its leading
/// columns in its order (`POSTGRES_COLUMNS = [..]`), which may include columns the struct does not
/// read; the fields' list is then SQLite's order. A field's column missing from the second list,
/// or in it twice, fails the build ([`column_at`]).
macro_rules! from_row_in_table_order {
    ($ty:ident, $columns:ident, { $($field:ident: $how:ident),* $(,)? }) => {
        /// The columns the struct is read from, in the table's order.
        pub const $columns: &[&str] = &[$(stringify!($field)),*];
        $crate::macros::from_row_in_table_order!(@impl sqlx::postgres::PgRow, $ty, $columns, { $($field: $how),* });
        $crate::macros::from_row_in_table_order!(@impl sqlx::sqlite::SqliteRow, $ty, $columns, { $($field: $how),* });
    };
    ($ty:ident, $columns:ident, $pg_columns:ident = [$($pg:ident),* $(,)?],
     { $($field:ident: $how:ident),* $(,)? }) => {
        /// The columns the struct is read from, in the order of SQLite's table.
        pub const $columns: &[&str] = &[$(stringify!($field)),*];
        /// The same columns in the order of PostgreSQL's table.
        pub const $pg_columns: &[&str] = &[$(stringify!($pg)),*];
        $crate::macros::from_row_in_table_order!(@impl sqlx::postgres::PgRow, $ty, $pg_columns, { $($field: $how),* });
        $crate::macros::from_row_in_table_order!(@impl sqlx::sqlite::SqliteRow, $ty, $columns, { $($field: $how),* });
    };
    (@impl $row:ty, $ty:ident, $columns:ident, { $($field:ident: $how:ident),* }) => {
        impl<'r> sqlx::FromRow<'r, $row> for $ty {
            fn from_row(row: &'r $row) -> Result<Self, sqlx::Error> {
                use sqlx::{Column as _, Row as _};
                fn value<'r, T>(
                    row: &'r $row,
                    in_order: bool,
                    at: usize,
                    name: &str,
                ) -> Result<T, sqlx::Error>
                where
                    T: sqlx::Decode<'r, <$row as sqlx::Row>::Database>
                        + sqlx::Type<<$row as sqlx::Row>::Database>,
                {
                    if in_order {
                        row.try_get(at)
                    } else {
                        row.try_get(name)
                    }
                }
                fn text<T>(row: &$row, in_order: bool, at: usize, name: &str) -> Result<T, sqlx::Error>
                where
                    T: std::str::FromStr<Err = $crate::UnknownVariant>,
                {
                    // Borrowed from the row: nothing is allocated for a known variant.
                    let text: &str = value(row, in_order, at, name)?;
                    text.parse()
                        .map_err(|e: $crate::UnknownVariant| sqlx::Error::ColumnDecode {
                            index: name.to_owned(),
                            source: Box::new(e),
                        })
                }
                let columns = row.columns();
                let in_order = columns.len() >= $columns.len()
                    && columns
                        .iter()
                        .zip($columns)
                        .all(|(column, name)| column.name() == *name);
                $(
                    let $field = $how(
                        row,
                        in_order,
                        const { $crate::macros::column_at($columns, stringify!($field)) },
                        stringify!($field),
                    )?;
                )*
                Ok($ty { $($field),* })
            }
        }
    };
}

/// Where `name` is in `columns`; for [`from_row_in_table_order`], at build time: a name not
/// there, or there twice, fails the build.
pub(crate) const fn column_at(columns: &[&str], name: &str) -> usize {
    let mut found = None;
    let mut at = 0;
    while at < columns.len() {
        if same_name(columns[at], name) {
            if found.is_some() {
                panic!("a field is in its table's column list twice")
            }
            found = Some(at);
        }
        at += 1;
    }
    match found {
        Some(at) => at,
        None => panic!("a field is not in its table's column list"),
    }
}

const fn same_name(a: &str, b: &str) -> bool {
    let (a, b) = (a.as_bytes(), b.as_bytes());
    if a.len() != b.len() {
        return false;
    }
    let mut i = 0;
    while i < a.len() {
        if a[i] != b[i] {
            return false;
        }
        i += 1;
    }
    true
}

pub(crate) use {from_row_in_table_order, id_type, text_enum};
