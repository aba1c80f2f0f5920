//! The parsed, ready-to-search form of a cron expression.

/// A set of small non-negative integers (each below 64) kept as a bit mask.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub(crate) struct Bits(u64);

impl Bits {
    pub(crate) fn insert(&mut self, value: u32) {
        debug_assert!(value < 64);
        self.0 |= 1 << value;
    }

    pub(crate) fn contains(self, value: u32) -> bool {
        value < 64 && self.0 & (1 << value) != 0
    }

    /// The smallest member, if any.
    pub(crate) fn first(self) -> Option<u32> {
        (self.0 != 0).then(|| self.0.trailing_zeros())
    }

    /// The smallest member that is `>= value`, if any.
    pub(crate) fn at_or_after(self, value: u32) -> Option<u32> {
        if value >= 64 {
            return None;
        }
        let rest = self.0 & (u64::MAX << value);
        (rest != 0).then(|| rest.trailing_zeros())
    }
}

/// A set of years from 1970 on.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub(crate) struct YearSet {
    words: Vec<u64>,
}

impl YearSet {
    pub(crate) const BASE: i32 = 1970;

    pub(crate) fn insert(&mut self, year: i32) {
        let Some(offset) = year
            .checked_sub(Self::BASE)
            .and_then(|o| usize::try_from(o).ok())
        else {
            return;
        };
        let word = offset / 64;
        if self.words.len() <= word {
            self.words.resize(word + 1, 0);
        }
        self.words[word] |= 1 << (offset % 64);
    }

    pub(crate) fn contains(&self, year: i32) -> bool {
        self.at_or_after(year) == Some(year)
    }

    /// The smallest member that is `>= year`, if any.
    pub(crate) fn at_or_after(&self, year: i32) -> Option<i32> {
        let offset = usize::try_from(year.saturating_sub(Self::BASE).max(0)).ok()?;
        let mut word = offset / 64;
        let mut mask = u64::MAX << (offset % 64);
        while word < self.words.len() {
            let rest = self.words[word] & mask;
            if rest != 0 {
                let found = word * 64 + rest.trailing_zeros() as usize;
                return i32::try_from(found).ok().map(|o| o + Self::BASE);
            }
            word += 1;
            mask = u64::MAX;
        }
        None
    }
}

/// How the day of a fire time is chosen. Exactly one of day-of-month and day-of-week carries a
/// rule; the other is `?`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) enum DayRule {
    /// Day-of-month values (1-31); days a month does not have are skipped.
    DaysOfMonth(Bits),
    /// `L`, `L-n` (`offset` = n), `LW`, `L-nW` (`weekday`).
    LastDayOfMonth { offset: u32, weekday: bool },
    /// `nW`: the weekday nearest to day n, staying inside the month.
    NearestWeekday(u32),
    /// Day-of-week values, 1 = Sunday ... 7 = Saturday.
    DaysOfWeek(Bits),
    /// `nL`: the last such weekday of the month.
    LastWeekdayOfMonth(u32),
    /// `n#k`: the k-th such weekday of the month.
    NthWeekdayOfMonth { weekday: u32, nth: u32 },
}

/// Everything the search needs, one member per field.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) struct Fields {
    pub(crate) seconds: Bits,
    pub(crate) minutes: Bits,
    pub(crate) hours: Bits,
    pub(crate) days: DayRule,
    pub(crate) months: Bits,
    pub(crate) years: YearSet,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bits_find_the_next_member() {
        let mut b = Bits::default();
        for v in [3, 17, 59] {
            b.insert(v);
        }
        assert_eq!(b.first(), Some(3));
        assert_eq!(b.at_or_after(4), Some(17));
        assert_eq!(b.at_or_after(17), Some(17));
        assert_eq!(b.at_or_after(60), None);
        assert!(b.contains(59) && !b.contains(58));
    }

    #[test]
    fn year_set_spans_several_words() {
        let mut y = YearSet::default();
        y.insert(2030);
        y.insert(2150);
        assert_eq!(y.at_or_after(1900), Some(2030));
        assert_eq!(y.at_or_after(2031), Some(2150));
        assert_eq!(y.at_or_after(2151), None);
        assert!(y.contains(2150) && !y.contains(2149));
    }
}
