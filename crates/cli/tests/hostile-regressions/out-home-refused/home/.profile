export A=1
