//! `square`: an example task for the `task` world. Input: a decimal integer (text); output: its
//! square (text). Anything else is an error naming the input.

wit_bindgen::generate!({ world: "task", path: "../../wit" });

use exports::weir::plugin::runner::Guest;

struct Square;

impl Guest for Square {
    fn run(input: Vec<u8>) -> Result<Vec<u8>, String> {
        let text = std::str::from_utf8(&input).map_err(|_| "input is not UTF-8".to_string())?.trim();
        let n: i64 = text.parse().map_err(|_| format!("input `{text}` is not a whole number"))?;
        let square = n.checked_mul(n).ok_or_else(|| format!("{n} squared overflows 64 bits"))?;
        Ok(square.to_string().into_bytes())
    }
}

export!(Square);
