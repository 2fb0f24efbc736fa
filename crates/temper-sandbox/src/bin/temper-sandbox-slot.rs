//! The slot helper as its own small program (tests and deployments that do not use the
//! `temper` binary, which contains the same helper).

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.split_first() {
        Some((flag, rest)) if flag == temper_sandbox::isolation::HELPER_ARG => {
            temper_sandbox::isolation::helper_main(rest)
        }
        _ => {
            let _ = std::io::Write::write_all(
                &mut std::io::stderr(),
                b"temper-sandbox-slot is started by the sandbox, not by hand\n",
            );
            std::process::exit(2);
        }
    }
}
