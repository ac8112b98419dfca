# Plot of the sustained workload (gnuplot; data from sustained.pl report).
#   gnuplot -e "dir='RESULTS_DIR'; title='MACHINE'" sustained.gp
# Writes dir/sustained.png: above, rows/s of every system by second of its
# run; below, the persist_sink shard's batches (left axis) and its state KB
# (right axis) by second of the sink's run.
if (!exists("title")) title = ''
set terminal pngcairo size 900,760 noenhanced
set datafile separator "\t"
set datafile missing "NaN"
set output dir."/sustained.png"
set multiplot layout 2,1 title "sustained workload: 8 clients, unique keys, default settings\n".title
set key outside right top
set grid
set lmargin 12		# the same left and right margins in both panels, so the time axes align
set rmargin 26
set xlabel "seconds into the run"
set format y "%.1s%c"

set title "rows/s (per 1 s sample)"
set ylabel "rows/s"
set yrange [0:*]
stats dir."/sustained.dat" skip 1 nooutput
ncols = STATS_columns
plot for [i=2:ncols-2] dir."/sustained.dat" using 1:i with lines lw 1.5 title columnheader(i)

set title "persist_sink shard: batches and state size"
set ylabel "batches"
set format y "%.0f"
set y2label "state KB"
set y2tics
set y2range [0:*]
plot dir."/sustained.dat" using 1:(column(ncols-1)) with lines lw 1.5 title "batches", \
     dir."/sustained.dat" using 1:(column(ncols)) axes x1y2 with lines lw 1.5 title "state KB"
unset multiplot
