//! `fuzz-afl TARGET`: runs fuzz target TARGET (see `fuzz::TARGETS`) under AFL++ in persistent
//! mode; outside AFL++ it runs the body once on its standard input (to replay a crash).

fn main() {
    let name = std::env::args().nth(1).unwrap_or_default();
    let Some(target) = fuzz::target(&name) else {
        let names: Vec<&str> = fuzz::TARGETS.iter().map(|t| t.name).collect();
        eprintln!("usage: fuzz-afl TARGET  (one of: {})", names.join(", "));
        std::process::exit(2);
    };
    (target.init)();
    let body = target.body;
    afl::fuzz!(|data: &[u8]| {
        body(data);
    });
}
