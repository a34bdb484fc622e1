from lightning_edit.cli import main

main()
