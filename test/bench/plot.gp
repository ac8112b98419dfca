# Plots of the benchmark's workload 1 sweep (gnuplot; data from summarize.pl).
#   gnuplot -e "dir='RESULTS_DIR'; title='MACHINE'" plot.gp
# Writes dir/throughput.png (rows/s against clients, one line per system)
# and dir/parts.png (parts per append against clients, shared vs unshared).
if (!exists("title")) title = ''
set terminal pngcairo size 900,560 noenhanced
set datafile separator "\t"
set datafile missing "NaN"
set key outside right top
set grid
set logscale x 2
set xlabel "concurrent clients (1000-row batches)"
set format y "%.1s%c"

set output dir."/throughput.png"
set title "rows/s by system (median of rounds)\n".title
set ylabel "rows/s"
set yrange [0:*]
plot for [i=2:6] dir."/sweep.dat" using 1:i with linespoints lw 2 pt 7 title columnheader(i)

set output dir."/parts.png"
set title "persist_sink parts per append (median of rounds)\n".title
set ylabel "parts per append"
set format y "%.1f"
plot for [i=2:3] dir."/parts.dat" using 1:i with linespoints lw 2 pt 7 title columnheader(i)
