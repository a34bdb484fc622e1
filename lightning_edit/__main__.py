from lightning_edit.console import main

main()
