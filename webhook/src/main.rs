fn main() -> anyhow::Result<()> {
    anyhow::bail!("not implemented yet")
}
