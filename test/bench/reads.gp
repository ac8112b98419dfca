# Plot of the reads workload's ratios (gnuplot; data from reads.pl report).
#   gnuplot -e "dir='RESULTS_DIR'; title='ROWS, MACHINE, DATE'" reads.gp
# Writes dir/reads.png: per query (and peak RSS row), compacted shard /
# heap and 48-batch shard / compacted shard, as bars on a log scale (1:
# as fast, or as much memory).
if (!exists("title")) title = ''
set terminal pngcairo size 1100,560 noenhanced
set datafile separator "\t"
set datafile missing "-"
set output dir."/reads.png"
set title "reads: time (or peak RSS) ratios, medians\n".title
set style data histogram
set style histogram clustered gap 1
set style fill solid 0.8 border -1
set boxwidth 0.9
set logscale y 10
set yrange [0.01:*]
set grid ytics
set xtics rotate by -35 left
set ylabel "ratio (log scale)"
set key outside top center horizontal
set arrow from graph 0, first 1 to graph 1, first 1 nohead lw 2 dt 2 lc rgb "black"
plot dir."/reads.dat" using 2:xtic(1) title "compacted / heap" lc rgb "#1f77b4", \
	'' using 3 title "48 batches / compacted" lc rgb "#ff7f0e"
