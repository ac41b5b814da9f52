//! What one cell holds: a character, its width, and the pen it was written
//! with (colours and attributes, as xterm keeps them: bold and faint are
//! two attributes, not one intensity).

/// A colour: the terminal's default, one of 256 indexed, or direct.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub enum Color {
    #[default]
    Default,
    Indexed(u8),
    Rgb(u8, u8, u8),
}

/// Attribute bits of a [`Pen`].
pub mod attr {
    pub const BOLD: u16 = 1 << 0;
    pub const FAINT: u16 = 1 << 1;
    pub const ITALIC: u16 = 1 << 2;
    pub const BLINK: u16 = 1 << 3;
    pub const INVERSE: u16 = 1 << 4;
    pub const INVISIBLE: u16 = 1 << 5;
    pub const STRIKE: u16 = 1 << 6;
    /// DECSCA: selective erase (DECSED, DECSEL) leaves the cell alone.
    pub const PROTECTED: u16 = 1 << 7;
    /// The underline style, 3 bits: 0 none, 1 single, 2 double, 3 curly,
    /// 4 dotted, 5 dashed (SGR `4:N`; 21 is double).
    pub const UNDERLINE_SHIFT: u16 = 8;
    pub const UNDERLINE_MASK: u16 = 0b111 << UNDERLINE_SHIFT;
}

/// The pen: what a printed character (and, for colours, an erased cell)
/// is given.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Pen {
    pub fg: Color,
    pub bg: Color,
    /// SGR 58; default: the foreground.
    pub underline_color: Color,
    pub attrs: u16,
}

impl Pen {
    pub fn has(&self, bit: u16) -> bool {
        self.attrs & bit != 0
    }

    pub fn set(&mut self, bit: u16, on: bool) {
        if on {
            self.attrs |= bit;
        } else {
            self.attrs &= !bit;
        }
    }

    /// 0 none, 1 single, 2 double, 3 curly, 4 dotted, 5 dashed.
    pub fn underline(&self) -> u16 {
        (self.attrs & attr::UNDERLINE_MASK) >> attr::UNDERLINE_SHIFT
    }

    pub fn set_underline(&mut self, style: u16) {
        self.attrs = (self.attrs & !attr::UNDERLINE_MASK)
            | ((style.min(5) << attr::UNDERLINE_SHIFT) & attr::UNDERLINE_MASK);
    }

    /// What erased, inserted and scrolled-in cells are given (xterm): the
    /// pen's colours, none of its attributes.
    pub fn blank(&self) -> Pen {
        Pen {
            fg: self.fg,
            bg: self.bg,
            underline_color: Color::Default,
            attrs: 0,
        }
    }

    /// The pen without its protection (what `DECSCA` sets is not a look).
    pub fn look(&self) -> Pen {
        Pen {
            attrs: self.attrs & !attr::PROTECTED,
            ..*self
        }
    }
}

/// How much of a character a cell holds.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub enum Width {
    /// A one-column character (or a blank).
    #[default]
    Narrow,
    /// The first column of a two-column character.
    Wide,
    /// The second column of a two-column character: its `ch` is unused.
    WideTail,
}

/// One cell of the grid.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cell {
    pub ch: char,
    /// Combining characters written after `ch`: two, as xterm keeps (its
    /// `combiningChars` default); more are dropped.
    pub marks: [Option<char>; 2],
    pub width: Width,
    pub pen: Pen,
}

impl Default for Cell {
    fn default() -> Cell {
        Cell::blank(Pen::default())
    }
}

impl Cell {
    /// An empty cell under `pen`'s colours.
    pub fn blank(pen: Pen) -> Cell {
        Cell {
            ch: ' ',
            marks: [None; 2],
            width: Width::Narrow,
            pen: pen.blank(),
        }
    }

    /// A character (no mark yet) under `pen`.
    pub fn new(ch: char, width: Width, pen: Pen) -> Cell {
        Cell {
            ch,
            marks: [None; 2],
            width,
            pen,
        }
    }

    pub fn is_default_blank(&self) -> bool {
        self.ch == ' '
            && self.marks[0].is_none()
            && self.width == Width::Narrow
            && self.pen == Pen::default()
    }
}
