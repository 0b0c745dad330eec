fn main() {
    println!("kcap-watch: under construction");
}
