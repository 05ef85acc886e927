from onward.cli import main

main()
