# Plot of the sustained workload (gnuplot; data from sustained.pl report).
#   gnuplot -e "dir='RESULTS_DIR'; title='MACHINE'; nsys=N" sustained.gp
# Writes dir/sustained.png: above, rows/s of every system by second of its
# run (the first nsys columns after the second); below, the batches of each
# persist_sink system's shard (the columns after them).
if (!exists("title")) title = ''
set terminal pngcairo size 1100,760 noenhanced
set datafile separator "\t"
set datafile missing "NaN"
set output dir."/sustained.png"
set multiplot layout 2,1 title "sustained workload: 8 clients, unique keys, default settings\n".title
set key outside right top
set grid
set lmargin 12		# the same left and right margins in both panels, so the time axes align
set rmargin 44
set xlabel "seconds into the run"
set format y "%.1s%c"

set title "rows/s (per 1 s sample)"
set ylabel "rows/s"
set yrange [0:*]
stats dir."/sustained.dat" skip 1 nooutput
ncols = STATS_columns
plot for [i=2:nsys+1] dir."/sustained.dat" using 1:i with lines lw 1.5 title columnheader(i)

set title "persist_sink shard: batches"
set ylabel "batches"
set format y "%.0f"
plot for [i=nsys+2:ncols] dir."/sustained.dat" using 1:i with lines lw 1.5 title columnheader(i)
unset multiplot
